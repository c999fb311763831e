// The multi-GPU rules that need no GPU: which device a rank trains on
// (train/device_choice.h), and the order the GradReducer puts bucket
// collectives and the optimizer in on a device communicator, checked with a
// fake communicator that models the two CUDA streams (a collective starts at
// an event recorded on the compute stream; wait_on_device queues a wait on the
// compute stream). With real streams NcclComm does exactly those two things
// (dist/cuda/nccl_comm.cu: order_after_compute, order_compute_after), which
// only tests/gpu/run.sh can run.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/grad_reducer.h"
#include "fake_comm.h"
#include "grad_check.h"
#include "nn/layers/layers.h"
#include "train/device_choice.h"

using namespace hpc;

namespace {

// ---- device choice ----------------------------------------------------------------------

train::DeviceView view(bool built, int gpus, bool every = true, int first_without = -1) {
  return {built, gpus, every, first_without};
}

std::string device_error(DeviceChoice want, const train::DeviceView& v) {
  try {
    train::resolve_device(want, v);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, AutoTakesTheGpuOnlyWhenEveryRankHasOne) {
  using train::resolve_device;
  EXPECT_EQ(resolve_device(DeviceChoice::Auto, view(true, 1)), Device::CUDA);
  EXPECT_EQ(resolve_device(DeviceChoice::Auto, view(true, 8)), Device::CUDA);  // several ranks, several GPUs
  EXPECT_EQ(resolve_device(DeviceChoice::Auto, view(true, 0)), Device::CPU);
  EXPECT_EQ(resolve_device(DeviceChoice::Auto, view(false, 0)), Device::CPU);
  EXPECT_EQ(resolve_device(DeviceChoice::Auto, view(false, 4)), Device::CPU);  // CPU-only build on a GPU node
  EXPECT_EQ(resolve_device(DeviceChoice::Auto, view(true, 2, false, 3)),
            Device::CPU);  // rank 3 has none: all on the CPU
  EXPECT_EQ(resolve_device(DeviceChoice::Cpu, view(true, 2)), Device::CPU);
  EXPECT_FALSE(train::device_needs_probe(DeviceChoice::Cpu));
  EXPECT_TRUE(train::device_needs_probe(DeviceChoice::Auto));
}

TEST(DeviceChoice, CudaIsOneLineErrorWhenItCannotWork) {
  EXPECT_EQ(train::resolve_device(DeviceChoice::Cuda, view(true, 2)), Device::CUDA);
  const std::string built = device_error(DeviceChoice::Cuda, view(false, 0));
  EXPECT_NE(built.find("built without CUDA"), std::string::npos) << built;
  const std::string none = device_error(DeviceChoice::Cuda, view(true, 0));
  EXPECT_NE(none.find("no CUDA device is visible"), std::string::npos) << none;
  const std::string other = device_error(DeviceChoice::Cuda, view(true, 1, false, 5));
  EXPECT_NE(other.find("rank 5 sees no CUDA device"), std::string::npos) << other;
  for (const std::string& m : {built, none, other}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// ---- bucket / stream ordering -----------------------------------------------------------

// What happened on the two fake streams.
struct Streams {
  struct Write {  // backward wrote gradients [begin, end) as compute op `at`
    int64_t begin, end;
    size_t at;
  };
  struct Collective {      // one bucket's AllReduce on the comm stream
    int64_t begin, end;    // its gradient range
    size_t after_compute;  // it waits for the event at this point of the compute stream
  };
  std::vector<std::string> compute;  // ops queued on the compute stream, in order
  std::vector<Write> writes;
  std::vector<Collective> collectives;
  int host_waits = 0;
};

// A model of 6 parameter tensors; backward completes them last to first.
const std::vector<int64_t> OFFSETS = {0, 4000, 4010, 70000, 70064, 200000, 200100};

Streams run_step(bool device, bool overlap) {
  Streams s;
  Tensor grads(Shape{OFFSETS.back()}, DType::F32);
  // The two streams: a collective starts after what the compute stream holds when it
  // is queued; on a device communicator wait_on_device queues a wait on the compute stream.
  test::FakeComm comm;
  comm.set_base(grads);
  comm.on_start = [&s](const test::FakeComm::Call& c) {
    EXPECT_EQ(c.op, dist::ReduceOp::Avg);
    for (const auto& [begin, end] : c.ranges) s.collectives.push_back({begin, end, s.compute.size()});
  };
  if (device) comm.on_device_wait = [&s](size_t i) { s.compute.push_back("wait " + std::to_string(i)); };
  const std::vector<int64_t> cuts(OFFSETS.begin(), OFFSETS.end() - 1);
  dist::GradReducer reducer(comm, grads, 64 * 1024.0, cuts, overlap);  // ~16k floats a bucket
  reducer.begin();
  for (size_t layer = OFFSETS.size() - 1; layer-- > 0;) {
    s.writes.push_back({OFFSETS[layer], OFFSETS[layer + 1], s.compute.size()});
    s.compute.push_back("backward layer " + std::to_string(layer));
    reducer.on_ready(OFFSETS[layer]);  // everything at or above this offset is written
  }
  reducer.finish();
  s.compute.emplace_back("optimizer");
  s.host_waits = comm.waits;
  EXPECT_EQ(comm.count("async"), static_cast<int>(comm.calls.size())) << "only asynchronous collectives";
  EXPECT_EQ(reducer.bucket_ranges().size(), s.collectives.size());
  for (size_t i = 0; i < s.collectives.size() && i < reducer.bucket_ranges().size(); ++i) {
    EXPECT_EQ(reducer.bucket_ranges()[i].first, s.collectives[i].begin) << "launch order, bucket " << i;
    EXPECT_EQ(reducer.bucket_ranges()[i].second, s.collectives[i].end) << "launch order, bucket " << i;
  }
  return s;
}

// Every collective waits for every write into its range; the optimizer waits for every collective.
void expect_ordered(const Streams& s) {
  int64_t covered = 0;
  for (size_t i = 0; i < s.collectives.size(); ++i) {
    const auto& c = s.collectives[i];
    covered += c.end - c.begin;
    for (const auto& w : s.writes) {
      if (w.begin >= c.end || c.begin >= w.end) continue;
      EXPECT_LT(w.at, c.after_compute)
          << "bucket " << i << " [" << c.begin << ", " << c.end << ") starts before backward wrote ["
          << w.begin << ", " << w.end << ")";
    }
  }
  EXPECT_EQ(covered, OFFSETS.back()) << "the buckets cover the gradient buffer exactly once";
}

TEST(GradReducerStreams, BucketsFollowTheirWritesAndTheOptimizerWaitsOnTheDevice) {
  const Streams s = run_step(true, true);
  ASSERT_GE(s.collectives.size(), 3u);
  expect_ordered(s);
  // Overlap: some bucket starts while backward still has layers to run.
  EXPECT_LE(s.collectives.front().after_compute, s.writes.back().at);
  // finish(): the compute stream waits for every bucket before the optimizer, the host for none.
  const size_t optimizer = s.compute.size() - 1;
  for (size_t i = 0; i < s.collectives.size(); ++i) {
    const auto it = std::find(s.compute.begin(), s.compute.end(), "wait " + std::to_string(i));
    ASSERT_NE(it, s.compute.end()) << "no device wait for bucket " << i;
    EXPECT_LT(static_cast<size_t>(it - s.compute.begin()), optimizer);
  }
  EXPECT_EQ(s.host_waits, 0);
}

TEST(GradReducerStreams, WithoutOverlapEverythingStartsAfterBackward) {
  const Streams s = run_step(true, false);
  expect_ordered(s);
  for (const auto& c : s.collectives) EXPECT_EQ(c.after_compute, s.writes.size());
}

TEST(GradReducerStreams, HostCommunicatorsWaitOnTheHost) {
  const Streams s = run_step(false, true);
  expect_ordered(s);
  EXPECT_EQ(s.host_waits, static_cast<int>(s.collectives.size()));
  EXPECT_EQ(s.compute.back(), "optimizer");
}

// ---- SyncBatchNorm keeps its sums stream-ordered ----------------------------------------

TEST(SyncBatchNormStreams, StatisticsUseTheStreamOrderedAllreduce) {
  const Shape in{3, 2, 2};
  test::BoundLayer b = test::bind_layer(test::layer_args("bn"), in, DType::F32, 5);
  const Tensor x = test::random_tensor(in.with_batch(4), DType::F32, 6);
  const Tensor dy = test::random_tensor(x.shape(), DType::F32, 7);
  Tensor y = b.output(4), dx = b.input_grad(4);
  test::FakeComm comm(0, 1);  // one rank: the sums stay as they are
  nn::RunCtx ctx;
  ctx.sum_over_replicas = dist::replica_sum(comm);
  b.layer->forward(x, y, ctx);
  b.layer->backward(x, y, dy, dx, ctx);
  EXPECT_EQ(comm.count("allreduce_before_compute"), 2);  // [Σx, Σx², n] in forward, [Σdy, Σdy·x̂] in backward
  EXPECT_EQ(comm.count("allreduce"), 0);
  for (const test::FakeComm::Call& c : comm.calls) EXPECT_EQ(c.op, dist::ReduceOp::Sum);
}

}  // namespace
