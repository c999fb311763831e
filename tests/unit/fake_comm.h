// The unit tests' one stand-in for dist::Communicator.
//
// FakeComm records every collective it is given, in order: what kind, which
// element ranges of a base buffer, which ReduceOp, and whether it was the
// stream-ordered allreduce_before_compute. Its requests never finish by
// themselves (test() is false: nothing may depend on a collective being done
// early) and count their waits. Two optional parts make it more than a log:
//   - a Group: the ranks are threads of the test and allreduce(Sum) of
//     float64 buffers really sums them, so a layer runs as on N ranks;
//   - on_start / on_device_wait hooks, with which a test models streams
//     (when each collective was queued, where the compute stream waited).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace hpc::test {

class FakeComm : public dist::Communicator {
 public:
  using Range = std::pair<int64_t, int64_t>;  // [begin, end) in elements of the base buffer
  struct Call {
    std::string kind;  // "allreduce", "allreduce_before_compute", "async", "reduce_scatter",
                       // "allgather_shards", "broadcast", "allgather", "barrier"
    dist::ReduceOp op = dist::ReduceOp::Sum;
    std::vector<Range> ranges;  // one per buffer (a group has several); relative to the base
    std::vector<std::vector<int64_t>>
        bounds;                // reduce_scatter / allgather_shards: each buffer's shard bounds
    size_t first_request = 0;  // index of the first request an async call made
  };
  // Threads that play ranks 0 … size−1 of one job.
  struct Group {
    explicit Group(int size) : sync(size), slots(static_cast<size_t>(size)) {}
    std::barrier<> sync;
    std::vector<std::vector<double>> slots;
  };

  explicit FakeComm(int rank = 0, int size = 2, Group* group = nullptr)
      : rank_(rank), size_(size), group_(group), tag_(dist::GroupTag::world(size)) {}

  // Ranges are reported relative to `base` (e.g. the flat gradient buffer).
  void set_base(const Tensor& base) { base_ = base; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "fake"; }
  const dist::GroupTag& group() const override { return tag_; }
  std::unique_ptr<dist::Communicator> split(int, int, const dist::GroupTag&) override {
    throw Error(EXIT_INTERNAL, "FakeComm cannot split");
  }
  std::unique_ptr<dist::Request> send_async(const Tensor&, int) override {
    throw Error(EXIT_INTERNAL, "FakeComm has no messages");
  }
  std::unique_ptr<dist::Request> recv_async(const Tensor&, int) override {
    throw Error(EXIT_INTERNAL, "FakeComm has no messages");
  }

  void allreduce(const Tensor& buf, dist::ReduceOp op) override {
    record("allreduce", op, {buf});
    sum_over_group(buf, op);
  }
  void allreduce_before_compute(const Tensor& buf, dist::ReduceOp op) override {
    record("allreduce_before_compute", op, {buf});
    sum_over_group(buf, op);
  }
  std::unique_ptr<dist::Request> allreduce_async(const Tensor& buf, dist::ReduceOp op) override {
    return std::move(allreduce_group({buf}, op)[0]);
  }
  std::vector<std::unique_ptr<dist::Request>> allreduce_group(const std::vector<Tensor>& bufs,
                                                              dist::ReduceOp op) override {
    record("async", op, bufs);
    calls.back().first_request = requests;
    std::vector<std::unique_ptr<dist::Request>> out;
    for (size_t i = 0; i < bufs.size(); ++i) out.push_back(std::make_unique<Req>(*this, requests++));
    if (on_start) on_start(calls.back());
    return out;
  }
  // Requests like allreduce_group's (never done by themselves); with a group, the sums are real (the
  // whole buffer, which includes every rank's shard).
  std::vector<std::unique_ptr<dist::Request>> reduce_scatter_group(
      const std::vector<Tensor>& bufs, dist::ReduceOp op,
      const std::vector<std::vector<int64_t>>& bounds) override {
    record("reduce_scatter", op, bufs);
    calls.back().bounds = bounds;
    calls.back().first_request = requests;
    std::vector<std::unique_ptr<dist::Request>> out;
    for (size_t i = 0; i < bufs.size(); ++i) out.push_back(std::make_unique<Req>(*this, requests++));
    if (on_start) on_start(calls.back());
    for (const Tensor& b : bufs) sum_over_group(b, op);
    return out;
  }
  std::unique_ptr<dist::Request> reduce_scatter_async(const Tensor& buf, dist::ReduceOp op,
                                                      const std::vector<int64_t>& bounds) override {
    return std::move(reduce_scatter_group({buf}, op, {bounds})[0]);
  }
  // With a group, every rank's shard really lands on every rank (float64 buffers).
  std::unique_ptr<dist::Request> allgather_shards_async(const Tensor& buf,
                                                        const std::vector<int64_t>& bounds) override {
    record("allgather_shards", dist::ReduceOp::Sum, {buf});
    calls.back().bounds = {bounds};
    calls.back().first_request = requests;
    auto req = std::make_unique<Req>(*this, requests++);
    if (on_start) on_start(calls.back());
    if (group_) {
      HPC_ASSERT(buf.dtype() == DType::F64 && bounds.size() == static_cast<size_t>(size_) + 1,
                 "FakeComm group: float64 gathers, one shard per rank");
      double* p = buf.data<double>();
      group_->slots[static_cast<size_t>(rank_)].assign(p, p + buf.count());
      group_->sync.arrive_and_wait();
      for (int q = 0; q < size_; ++q)
        for (int64_t i = bounds[static_cast<size_t>(q)]; i < bounds[static_cast<size_t>(q) + 1]; ++i)
          p[i] = group_->slots[static_cast<size_t>(q)][static_cast<size_t>(i)];
      group_->sync.arrive_and_wait();
    }
    return req;
  }
  // With a group, root's float64 buffer really reaches every rank.
  void broadcast(const Tensor& buf, int root) override {
    record("broadcast", dist::ReduceOp::Sum, {buf});
    if (!group_) return;
    HPC_ASSERT(buf.dtype() == DType::F64, "FakeComm group: float64 broadcasts");
    double* p = buf.data<double>();
    if (rank_ == root) group_->slots[static_cast<size_t>(root)].assign(p, p + buf.count());
    group_->sync.arrive_and_wait();
    if (rank_ != root) std::copy_n(group_->slots[static_cast<size_t>(root)].data(), buf.count(), p);
    group_->sync.arrive_and_wait();
  }
  // With a group, every rank's float64 buffer lands in everyone's recv, in rank order.
  void allgather(const Tensor& send, const Tensor& recv) override {
    record("allgather", dist::ReduceOp::Sum, {send});
    if (!group_) return;
    HPC_ASSERT(send.dtype() == DType::F64 && recv.count() == send.count() * size_,
               "FakeComm group: allgather");
    const double* p = send.data<double>();
    group_->slots[static_cast<size_t>(rank_)].assign(p, p + send.count());
    group_->sync.arrive_and_wait();
    for (int q = 0; q < size_; ++q)
      std::copy_n(group_->slots[static_cast<size_t>(q)].data(), send.count(),
                  recv.data<double>() + q * send.count());
    group_->sync.arrive_and_wait();
  }
  void barrier() override {
    record("barrier", dist::ReduceOp::Sum, {});
    if (group_) group_->sync.arrive_and_wait();
  }

  // How many calls of `kind` were made.
  int count(const std::string& kind) const {
    int n = 0;
    for (const Call& c : calls) n += c.kind == kind ? 1 : 0;
    return n;
  }

  std::vector<Call> calls;
  size_t requests = 0;       // made so far
  int tests = 0, waits = 0;  // Request::test / host waits (wait, and wait_on_device by default)
  std::function<void(const Call&)> on_start;           // an async call was made (its requests exist)
  std::function<void(size_t request)> on_device_wait;  // set: wait_on_device is a stream wait, not a host one

 private:
  struct Req final : dist::Request {
    Req(FakeComm& c, size_t i) : comm(c), index(i) {}
    void wait() override { ++comm.waits; }
    bool test() override {
      ++comm.tests;
      return false;
    }
    void wait_on_device() override {
      if (!comm.on_device_wait) return wait();  // what a host communicator does (the default)
      comm.on_device_wait(index);
    }
    FakeComm& comm;
    size_t index;
  };

  void record(const std::string& kind, dist::ReduceOp op, const std::vector<Tensor>& bufs) {
    Call c;
    c.kind = kind;
    c.op = op;
    for (const Tensor& b : bufs) {
      const int64_t off = base_.defined()
                              ? (static_cast<const char*>(b.raw()) - static_cast<const char*>(base_.raw())) /
                                    static_cast<int64_t>(dtype_size(b.dtype()))
                              : 0;
      c.ranges.emplace_back(off, off + b.count());
    }
    calls.push_back(std::move(c));
  }

  // With a group: every rank's float64 buffer summed, in rank order, on every rank.
  void sum_over_group(const Tensor& buf, dist::ReduceOp op) {
    if (!group_) return;
    HPC_ASSERT(buf.dtype() == DType::F64 && op == dist::ReduceOp::Sum, "FakeComm group: float64 sums only");
    double* p = buf.data<double>();
    group_->slots[static_cast<size_t>(rank_)].assign(p, p + buf.count());
    group_->sync.arrive_and_wait();
    for (int64_t i = 0; i < buf.count(); ++i) {
      double s = 0;
      for (const std::vector<double>& slot : group_->slots) s += slot[static_cast<size_t>(i)];
      p[i] = s;
    }
    group_->sync.arrive_and_wait();  // nobody refills a slot before every rank has read it
  }

  int rank_, size_;
  Group* group_;
  dist::GroupTag tag_;
  Tensor base_;
};

}  // namespace hpc::test
