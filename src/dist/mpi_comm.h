// MpiComm: the Communicator over MPI for host buffers (CPU nodes).
//
// Allreduce, reduce-scatter and the sharded all-gather are RankOrderAllreduce
// (rank_order_allreduce.h): bitwise the same result for any bucketing, exact
// averages (one division), progress on every test(). Broadcast, allgather
// and barrier are MPI's non-blocking collectives. Every wait polls against a deadline (dist.timeout): a peer
// that never arrives becomes a PeerError (exit 3) whose message, through
// the HangHandler (the Watchdog), names the rank that is behind. Each wait
// and test also advances every other allreduce in flight on this
// communicator, so buckets started during backward keep moving while the
// main thread waits for something else (a SyncBatchNorm statistic, say).
//
// Buckets (allreduce_async) on one node run one at a time, in the order they
// were started, like collectives on one NCCL stream: on shared memory that
// was 1.3–1.9× faster than running four at once. When the ranks span nodes
// (MPI_Comm_split_type), every bucket's messages are posted as soon as it
// starts, so that network round trips overlap instead of adding up, and
// messages to other nodes go in eager-sized pieces (rank_order_allreduce.h).
// Neither changes a bit of the result: each bucket's reduction is its own,
// in rank order. A blocking allreduce (a SyncBatchNorm statistic) does not
// queue behind them.
//
// Progress thread (with MPI_THREAD_MULTIPLE): MPI moves data only inside
// MPI calls, and backward calls in only between layers, so a bucket started
// before a long layer would sit still until it ends. While allreduces are
// in flight (allreduce_async: buckets), a helper thread advances them every
// 500 µs (one MPI_Testsome each, plus the folds that are due); it sleeps on
// a condition variable otherwise, and while the main thread itself polls in
// a wait (two threads polling one core compete). A blocking allreduce is
// left to its own wait loop: waking a thread for a 10 µs collective would
// cost more than it saves. All allreduce state is touched under one mutex, so the helper
// and the main thread never race; the helper never blocks and never
// throws (an MPI failure it sees is reported by the next wait or test).
//
// Works on its own duplicate of the given communicator, so its messages
// never match anyone else's, and sends and receives (the pipeline's
// messages, mpi_p2p.cpp) on a second one, so that their tags never meet the
// allreduces'. The collectives are called from one thread. Its collectives
// are numbered in its group (dist/group.h; the world by default), its
// messages per peer and direction (dist/heartbeat.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/heartbeat.h"
#include "dist/rank_order_allreduce.h"

namespace hpc::dist {

class MpiAllreduceRequest;

class MpiComm final : public Communicator {
 public:
  // Collective over comm. hb (collective numbers) and hang (timeout reports) may be null;
  // progress_thread needs MPI_THREAD_MULTIPLE. tag: the group comm spans (empty ranks: the world).
  MpiComm(MPI_Comm comm, double timeout_s, Heartbeat* hb = nullptr, HangHandler* hang = nullptr,
          bool progress_thread = false, GroupTag tag = GroupTag());
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  const GroupTag& group() const override { return tag_; }
  // MPI_Comm_split; the new communicator has the progress thread when this one has it or it is a dp
  // group (gradient buckets), and its own numbering (tag).
  std::unique_ptr<Communicator> split(int color, int key, const GroupTag& tag) override;
  // MPI_Isend / MPI_Irecv (pieces of at most max_message elements), waited for against dist.timeout.
  std::unique_ptr<Request> send_async(const Tensor& buf, int peer) override;
  std::unique_ptr<Request> recv_async(const Tensor& buf, int peer) override;
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }
  // Largest element count of one MPI message: INT_MAX (MPI counts are int); larger
  // buffers travel in pieces. Tests lower it to exercise the splitting.
  void set_max_message(int64_t count) { max_msg_ = count < 1 ? 1 : (count > INT_MAX ? INT_MAX : count); }
  // Tests: treat each run of ranks_per_node consecutive ranks as one node (0: the real nodes), so
  // that the across-nodes ways (buckets all at once, pieces to other nodes) run on one host.
  // On every rank alike, with no allreduce in flight.
  void set_test_node_size(int ranks_per_node);
  // dist.reduce = native: allreduce and reduce-scatter run as the MPI library's MPI_Iallreduce /
  // MPI_Ireduce_scatter (Avg: the sum, then one division), whose algorithm (and so the summation
  // order, and the bits) the library picks by message size and layout. On every rank alike.
  void set_native_reduce(bool native) { native_ = native; }

  void allreduce(const Tensor& buf, ReduceOp op) override;
  std::unique_ptr<Request> allreduce_async(const Tensor& buf, ReduceOp op) override;
  // Rank-ordered like the allreduce (RankOrderAllreduce without its allgather round): the same bits.
  // Queued with the buckets (one at a time on one node), advanced by the progress thread.
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& buf, ReduceOp op,
                                                const std::vector<int64_t>& bounds) override;
  // The rank-ordered scheme's allgather round alone (RankOrderAllreduce; copies: exact), queued with
  // the buckets and advanced by the progress thread, so that a parameter gather moves while a layer
  // computes (MPI_Iallgatherv moves only inside MPI calls, which a long layer does not make).
  std::unique_ptr<Request> allgather_shards_async(const Tensor& buf,
                                                  const std::vector<int64_t>& bounds) override;
  void broadcast(const Tensor& buf, int root) override;
  void allgather(const Tensor& send, const Tensor& recv) override;
  void barrier() override;
  // Every rank's text, in rank order, at root (empty elsewhere).
  std::vector<std::string> gather_text(const std::string& mine, int root);

  // Advances every allreduce in flight. Throws PeerError if MPI reports a failure.
  void progress();

 private:
  friend class MpiAllreduceRequest;
  // A collective starts / completes: its number, and the flight record (flight_recorder.h).
  uint64_t begin_collective(CollOp op, int64_t count, DType dtype);
  void end_collective(uint64_t seq);
  // Collective #seq of this communicator's group.
  WaitPoint point(uint64_t seq, CollOp op) const { return {seq, op, tag_.kind, -1}; }
  // A message to (Send) or from (Recv) group rank peer: its number and flight record; then its end.
  WaitPoint begin_message(CollOp op, const Tensor& buf, int peer);
  void end_message(const WaitPoint& at);
  std::unique_ptr<Request> start_message(CollOp op, const Tensor& buf, int peer);
  // bounds: a reduce-scatter over those shards, or with gather an all-gather of them.
  std::unique_ptr<Request> start_allreduce(const Tensor& buf, ReduceOp op, bool background,
                                           const std::vector<int64_t>* bounds = nullptr, bool gather = false);
  void wait_until(const std::function<bool()>& done, const WaitPoint& at);
  void wait_all(std::vector<MPI_Request>& reqs, const WaitPoint& at);
  [[noreturn]] void fail(const WaitPoint& at, const std::string& reason);
  struct Failure {
    uint64_t seq;
    std::string reason;
  };
  // One step of every allreduce in flight; mu_ held. Returns the first MPI failure instead of throwing.
  std::optional<Failure> advance_all_locked();
  void helper_loop();

  MPI_Comm comm_ = MPI_COMM_NULL;      // our duplicate
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // another, for sends and receives
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  Heartbeat* hb_;
  HangHandler* hang_;
  GroupTag tag_;
  bool progress_ = false;                // a progress thread was asked for (MPI_THREAD_MULTIPLE)
  std::vector<uint64_t> sends_, recvs_;  // messages started, per group rank of the peer
  int64_t max_msg_ = INT_MAX;
  bool native_ = false;
  std::unique_ptr<Request> start_native(const Tensor& buf, ReduceOp op, const std::vector<int64_t>* bounds);
  uint64_t tags_used_ = 0;         // allreduces started here: tags must agree across ranks
  uint64_t local_seq_ = 0;         // collective numbers when there is no Heartbeat
  int tag_span_ = 16383;           // allreduce k uses tags 2·(k mod span) and +1
  int max_live_background_ = 1;    // buckets with messages posted at once (see mpi_comm.cpp)
  std::vector<char> node_remote_;  // per rank: on another node (empty when all share this one)
  std::vector<char> remote_;       // what the allreduces use: node_remote_, or the tests' pretence
  std::mutex mu_;                  // guards active_, every allreduce's state, pool_ and helper_failure_
  std::vector<MpiAllreduceRequest*> active_;  // live: messages posted
  std::deque<MpiAllreduceRequest*> queued_;   // background ones waiting for the bucket before them
  int background_ = 0;       // allreduce_async requests not yet done, live or queued (the helper's work)
  int live_background_ = 0;  // of those, live
  std::atomic<bool> main_polling_{false};  // the main thread is in a wait loop, advancing everything itself
  ScratchPool pool_;
  std::optional<Failure> helper_failure_;
  std::condition_variable work_cv_;
  bool stop_ = false;
  std::thread helper_;
};

MPI_Datatype mpi_type(DType t);

// MPI's message for an error code.
std::string mpi_error_string(int code);

// One-word MPI error check over core/check.h's failure path: the call,
// file:line, rank and host, then every rank is aborted (a failed MPI call is
// a lost peer or network: exit 3).
#define mpiCheck(call)                                                                        \
  HPC_CHECK_CALL("MPI", call, hpc_rc_ != MPI_SUCCESS, ::hpc::dist::mpi_error_string(hpc_rc_), \
                 ::hpc::EXIT_PEER)

}  // namespace hpc::dist
