// The one interface every collective goes through.
//
// Two implementations: MpiComm (host buffers, CPU nodes) and NcclComm (device
// buffers, its own CUDA stream; dist/nccl_comm.h). Buffers are tensors, so
// counts and dtypes come from them; all ranks must call collectives in the
// same order with the same counts. A single-process run uses SelfComm, whose
// collectives are no-ops, so code never needs an "am I distributed" branch.
//
// A communicator spans a group of the parallel grid (dist/group.h: the
// world, or one dp, tp, pp or embed group), numbers its collectives within
// that group, and names it in hang reports and flight records. split()
// makes the groups' communicators from the world's (MPI_Comm_split,
// ncclCommSplit); send and recv move tensors between two ranks of a group
// (the pipeline's activations and gradients).
//
// Every collective and every message either completes or throws PeerError
// (exit 3) within dist.timeout of its wait: a dead or stuck peer never
// becomes a hang.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/group.h"

namespace hpc::dist {

// Avg is exact: the sum divided once by the world size (ncclAvg on NCCL),
// so every rank holds bitwise the same result.
enum class ReduceOp { Sum, Avg, Max };

// A collective in flight. test() advances it without blocking (MPI needs
// these calls to make progress) and says whether it is done; wait() blocks
// until it is done or throws PeerError on timeout / a failed peer. The
// buffer must stay untouched until then.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  // Orders the device work queued after this call (on the backend's compute
  // stream) after the collective, without blocking the host: NcclComm makes
  // the compute stream wait for the collective's end event, and its watchdog
  // still bounds the collective by dist.timeout. Host collectives have no
  // stream to order, so the default waits.
  virtual void wait_on_device() { wait(); }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "mpi", "nccl", "self"
  // The group this communicator spans: its kind, world ranks and name.
  virtual const GroupTag& group() const = 0;

  // Collective over this communicator: the ranks with the same color (≥ 0) form a new communicator,
  // ordered by key, numbered and named as `tag` (this rank's group); color < 0: this rank is in
  // none, and gets null. A group of one rank is a SelfComm.
  virtual std::unique_ptr<Communicator> split(int color, int key, const GroupTag& tag) = 0;

  // ---- point-to-point (between two ranks of this communicator) ----
  // `peer` is a rank of this communicator. A send and the receive it meets have the same count and
  // dtype; the messages from one rank to another arrive in the order they were sent (a receive may
  // be posted long before: its dist.timeout counts from its wait). buf stays untouched until the
  // request completes.
  virtual std::unique_ptr<Request> send_async(const Tensor& buf, int peer) = 0;
  virtual std::unique_ptr<Request> recv_async(const Tensor& buf, int peer) = 0;
  struct Message {
    bool send = true;  // false: a receive
    Tensor buf;
    int peer = 0;
  };
  // Several messages started together (NCCL: one ncclGroupStart/End, so that a send and a receive
  // with two neighbours cannot deadlock); one request each, in order.
  virtual std::vector<std::unique_ptr<Request>> message_group(const std::vector<Message>& messages) {
    std::vector<std::unique_ptr<Request>> out;
    out.reserve(messages.size());
    for (const Message& m : messages)
      out.push_back(m.send ? send_async(m.buf, m.peer) : recv_async(m.buf, m.peer));
    return out;
  }
  void send(const Tensor& buf, int peer) { send_async(buf, peer)->wait(); }
  void recv(const Tensor& buf, int peer) { recv_async(buf, peer)->wait(); }

  // In place over buf.
  virtual void allreduce(const Tensor& buf, ReduceOp op) = 0;
  // In place, complete for all device work queued after it: a blocking
  // allreduce on host communicators; NcclComm only makes the compute stream
  // wait for it (Request::wait_on_device), so a SyncBatchNorm statistic does
  // not stall the host in the middle of forward or backward.
  virtual void allreduce_before_compute(const Tensor& buf, ReduceOp op) { allreduce(buf, op); }
  virtual std::unique_ptr<Request> allreduce_async(const Tensor& buf, ReduceOp op) = 0;
  // Several buffers started together (NCCL fuses them in one ncclGroupStart/End);
  // one request per buffer, in order.
  virtual std::vector<std::unique_ptr<Request>> allreduce_group(const std::vector<Tensor>& bufs,
                                                                ReduceOp op) {
    std::vector<std::unique_ptr<Request>> out;
    out.reserve(bufs.size());
    for (const Tensor& b : bufs) out.push_back(allreduce_async(b, op));
    return out;
  }
  virtual void broadcast(const Tensor& buf, int root) = 0;

  // ---- sharded collectives (ZeRO, dist/shards.h) ----
  // `bounds` cuts buf into size() contiguous shards: rank r owns elements
  // [bounds[r], bounds[r+1]); size()+1 non-decreasing offsets from 0 to
  // buf.count(), the same on every rank (a shard may be empty).
  //
  // Reduce-scatter in place: afterwards rank r's own shard holds the
  // reduction over the ranks, bitwise what allreduce(buf, op) leaves there
  // (MpiComm folds in rank order either way); the rest of buf is unspecified.
  // The default is that allreduce: correct, with more traffic than needed.
  virtual std::unique_ptr<Request> reduce_scatter_async(const Tensor& buf, ReduceOp op,
                                                        const std::vector<int64_t>& bounds) {
    (void)bounds;
    return allreduce_async(buf, op);
  }
  // Several buffers started together (one NCCL group), each with its own bounds; one request each.
  virtual std::vector<std::unique_ptr<Request>> reduce_scatter_group(
      const std::vector<Tensor>& bufs, ReduceOp op, const std::vector<std::vector<int64_t>>& bounds) {
    std::vector<std::unique_ptr<Request>> out;
    out.reserve(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) out.push_back(reduce_scatter_async(bufs[i], op, bounds[i]));
    return out;
  }
  void reduce_scatter(const Tensor& buf, ReduceOp op, const std::vector<int64_t>& bounds) {
    reduce_scatter_async(buf, op, bounds)->wait();
  }
  // All-gather in place: afterwards every rank holds every rank's own shard (copies: exact).
  virtual std::unique_ptr<Request> allgather_shards_async(const Tensor& buf,
                                                          const std::vector<int64_t>& bounds) = 0;
  void allgather_shards(const Tensor& buf, const std::vector<int64_t>& bounds) {
    allgather_shards_async(buf, bounds)->wait();
  }

  // recv holds size() × send.count() elements, rank r's part at offset r·send.count().
  virtual void allgather(const Tensor& send, const Tensor& recv) = 0;
  virtual void barrier() = 0;
};

// SyncBatchNorm's reduction (nn::RunCtx::sum_over_replicas) through `comm`:
// a sum in place, ordered before the device work that reads it.
inline std::function<void(const Tensor&)> replica_sum(Communicator& comm) {
  return [&comm](const Tensor& sums) { comm.allreduce_before_compute(sums, ReduceOp::Sum); };
}

// A group of one rank: every collective is the identity; there is no peer to message.
class SelfComm final : public Communicator {
 public:
  explicit SelfComm(GroupTag tag = GroupTag::world(1)) : tag_(std::move(tag)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }
  const GroupTag& group() const override { return tag_; }
  std::unique_ptr<Communicator> split(int color, int, const GroupTag& tag) override {
    return color < 0 ? nullptr : std::make_unique<SelfComm>(tag);
  }
  std::unique_ptr<Request> send_async(const Tensor&, int peer) override;
  std::unique_ptr<Request> recv_async(const Tensor&, int peer) override;
  void allreduce(const Tensor&, ReduceOp) override {}
  std::unique_ptr<Request> allreduce_async(const Tensor&, ReduceOp) override;
  void broadcast(const Tensor&, int) override {}
  void allgather(const Tensor& send, const Tensor& recv) override;
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& buf, ReduceOp op,
                                                const std::vector<int64_t>&) override {
    return allreduce_async(buf, op);
  }
  std::unique_ptr<Request> allgather_shards_async(const Tensor& buf, const std::vector<int64_t>&) override {
    return allreduce_async(buf, ReduceOp::Sum);  // one rank owns everything: nothing moves
  }
  void barrier() override {}

 private:
  GroupTag tag_;
};

}  // namespace hpc::dist
