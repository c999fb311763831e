// The allreduce MpiComm runs: a reduce-scatter and an allgather over
// non-blocking point-to-point messages, reducing every element in rank order.
//
// Why not MPI_Iallreduce: Open MPI's non-blocking allreduce on an in-place
// buffer is a binomial reduce + broadcast (libnbc), 2–3× slower than the
// blocking MPI_Allreduce for large buffers, and the result of an element
// may depend on the message size that an MPI library's algorithm choice
// sees, so different gradient bucket sizes could give different bits.
//
// Here, rank r owns chunk r (elements [n·r/p, n·(r+1)/p)). Every rank sends
// chunk q to its owner q; the owner folds the p contributions strictly in
// rank order, ((x₀ ∘ x₁) ∘ x₂) ∘ …, divides once by p for an average, and
// sends the result back to everyone (allgather). Hence:
//   * every element is reduced in the same order whatever the buffer's size
//     or offset: any bucketing gives bitwise the same gradients, and every
//     rank holds the same bits (the owner's result);
//   * each rank sends and receives 2·n·(p−1)/p elements, like a ring, in two
//     rounds instead of 2(p−1);
//   * progress() advances the state machine without blocking, so calling it
//     between layers of backward overlaps the reduction with computation;
//   * counts above INT_MAX travel as several messages of ≤ max_msg elements;
//   * to a peer on another node, messages go in pieces of at most
//     REMOTE_PIECE_BYTES, below Open MPI's TCP eager limit (64 KiB), all
//     posted at once: a larger message waits a round trip for the receiver's
//     rendezvous answer before its data leaves, which on a link with 5 ms of
//     latency cost each bucket several round trips (bench/multinode.sh).
//     Where the eager limit is lower, the pieces' handshakes still overlap.
// At most 8 contributions are buffered at a time (8·n/p scratch elements);
// contributions are folded as they arrive, in order. Small buffers (at most
// 64 KiB to receive per rank) take one round instead of two: every rank
// sends its whole buffer to every other and folds all of them, in the same
// rank order, so the bits are the same as in the two-round scheme (and any
// bucketing still gives the same result), at half the latency.
//
// Reduce-scatter (ZeRO): the same object with the chunk boundaries given
// (rank r owns [bounds[r], bounds[r+1])) and the allgather round left out.
// Every element is folded by its owner in the same rank order, so a
// reduce-scatter leaves bitwise what the allreduce would in the owner's
// chunk, whatever the boundaries. All-gather (ZeRO's parameters): only the
// allgather round, each rank sending its own chunk to every other; copies,
// so exact. Being the same object, both queue with the gradient buckets and
// the progress thread advances them (MpiComm), which is what lets a
// parameter gather run while a layer computes.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace hpc::dist {

// An MPI call returned an error (e.g. a peer's connection broke).
class MpiCallFailed : public std::runtime_error {
 public:
  MpiCallFailed(int code, const char* call);
};

// Scratch buffers reused across collectives, so that a step does not page-fault fresh memory.
class ScratchPool {
 public:
  class Lease {
   public:
    Lease() = default;
    Lease(ScratchPool* pool, std::vector<char> buf) : pool_(pool), buf_(std::move(buf)) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), buf_(std::move(o.buf_)) { o.pool_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    char* data() { return buf_.data(); }

   private:
    void give_back() noexcept;
    ScratchPool* pool_ = nullptr;
    std::vector<char> buf_;
  };
  ScratchPool() { free_.reserve(MAX_FREE); }
  Lease get(size_t bytes);

 private:
  static constexpr size_t MAX_FREE = 16;  // reserved: giving a buffer back never allocates
  std::vector<std::vector<char>> free_;
};

class RankOrderAllreduce {
 public:
  // Posts the first messages. buf is reduced in place; it and the pool must outlive this object.
  // remote: per rank of comm, whether it is on another node (null: none is); it must outlive this.
  // With bounds (size+1 offsets, 0 … buf.count()) it is a reduce-scatter: they cut the chunks and
  // only the own chunk is reduced (in the one-round mode, the whole buffer is: the same bits);
  // with bounds and gather_only, an all-gather of the chunks (op unused). Without, an allreduce.
  RankOrderAllreduce(const Tensor& buf, ReduceOp op, MPI_Comm comm, int tag, int64_t max_msg,
                     ScratchPool& pool, const std::vector<char>* remote = nullptr,
                     std::vector<int64_t> bounds = {}, bool gather_only = false);
  // The largest message to a peer on another node (see above).
  static constexpr int64_t REMOTE_PIECE_BYTES = int64_t{63} * 1024;
  ~RankOrderAllreduce();
  RankOrderAllreduce(const RankOrderAllreduce&) = delete;
  RankOrderAllreduce& operator=(const RankOrderAllreduce&) = delete;

  // Advances without blocking; true once the result is in buf. Throws MpiCallFailed.
  bool progress();

 private:
  enum class Kind { RsSend, RsRecv, AgSend, AgRecv };
  // One message to or from a peer (several requests when it exceeds max_msg).
  struct Transfer {
    Kind kind = Kind::RsSend;
    int peer = -1;
    int remaining = 0;  // requests not yet complete
    bool posted = false;
    bool done() const { return posted && remaining == 0; }
  };
  struct Slot {
    char* data = nullptr;  // count(r) elements of scratch
    Transfer t;            // RsRecv of the contribution it holds (t.peer)
  };
  void start(ScratchPool& pool);
  int64_t lo(int q) const { return bounds_.empty() ? n_ * q / p_ : bounds_[static_cast<size_t>(q)]; }
  // Elements of each contribution this rank receives: its chunk, or everything in the one-round mode.
  int64_t incoming() const { return direct_ ? n_ : count(r_); }
  int64_t count(int q) const { return lo(q + 1) - lo(q); }
  char* chunk(int q) const { return base_ + lo(q) * static_cast<int64_t>(esize_); }
  void post(Transfer& t, Kind kind, int peer, char* data, int64_t count);
  // One MPI_Testsome over every request in flight; reacts to sends that completed.
  void poll();
  void give_slot(int s);
  void fold(int q);
  void finish_chunk();

  char* base_;
  int64_t n_;
  DType dtype_;
  size_t esize_;
  MPI_Datatype mtype_;
  ReduceOp op_;
  MPI_Comm comm_;
  int r_ = 0, p_ = 1, tag_;
  int64_t max_msg_;
  int64_t remote_msg_;               // max_msg_ for peers on other nodes (REMOTE_PIECE_BYTES)
  const std::vector<char>* remote_;  // per peer: on another node (null: none)
  std::vector<int64_t> bounds_;      // reduce-scatter: the chunk boundaries (empty: n·q/p, and an allgather)
  bool scatter_only_;
  bool gather_only_;  // the allgather round alone

  // Every request ever posted (MPI_REQUEST_NULL once complete) and the transfer it belongs to: at
  // most 4·(p−1) transfers, each one request per piece (a few dozen for a bucket of a few MiB sent
  // to another node), so the arrays stay small and Testsome needs no compaction.
  std::vector<MPI_Request> reqs_;
  std::vector<Transfer*> owner_;
  std::vector<int> completed_;
  int live_ = 0;
  std::vector<Transfer> rs_send_, ag_recv_, ag_send_;  // per peer; never resized after construction
  std::vector<Slot> slots_;
  std::vector<int> slot_of_;  // per peer: the slot its contribution went to, or -1
  std::vector<int> order_;    // peers in fold order (rank order without me)
  size_t next_post_ = 0;      // order_[next_post_] is the next contribution to get a slot
  int fold_next_ = 0;         // next rank to fold
  char* acc_ = nullptr;       // running fold before my own turn (r > 0): rank 0's slot, kept until then;
                              // in the one-round mode, a scratch buffer for the whole result
  ScratchPool::Lease scratch_;
  bool direct_ = false;  // one round: small buffers (see DIRECT_BYTES)
  bool folded_ = false, done_ = false;
};

}  // namespace hpc::dist
