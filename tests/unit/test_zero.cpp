// ZeRO (dist.zero = 1 | 2) without MPI: the shard plan, the optimizer on a
// shard, the shard-wise gradient norm, and the order a sharded GradReducer
// puts its reduce-scatters and parameter all-gathers in on a device
// communicator (the fake one of test_multigpu_logic, modelling the two CUDA
// streams: a collective starts after what the compute stream holds when it
// is queued; wait_on_device queues a wait on the compute stream). NcclComm
// does the same two things for its grouped ncclReduce / ncclBroadcast
// (dist/cuda/nccl_comm.cu), which only a GPU can run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "core/host_pages.h"
#include "dist/grad_reducer.h"
#include "dist/shards.h"
#include "fake_comm.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "train/mixed_precision.h"
#include "train/sharding.h"

using namespace hpc;

namespace {

Tensor filled(int64_t n, uint64_t seed) {
  Tensor t(Shape{n}, DType::F32);
  for (int64_t i = 0; i < n; ++i)
    t.data<float>()[i] =
        static_cast<float>(std::sin(0.37 * static_cast<double>(i) + static_cast<double>(seed)) *
                           (1.0 + static_cast<double>(i % 7) * 100.0));
  return t;
}

TEST(ZeroOptimizer, AShardStepsBitwiseLikeTheWholeBuffer) {
  const int64_t n = 1000;
  const std::vector<optim::DecayRange> decay = {{0, 300}, {310, 400}, {900, 90}};
  for (OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::AdamW}) {
    OptimConfig cfg;
    cfg.name = kind;
    cfg.momentum = 0.9;
    cfg.weight_decay = 0.1;
    Tensor p = filled(n, 1), g = filled(n, 2);
    auto whole = optim::Optimizer::create(cfg, p, decay);
    const std::vector<int64_t> b = dist::shard_bounds(n, 3);
    Tensor ps = filled(n, 1);
    std::vector<std::unique_ptr<optim::Optimizer>> parts;
    for (int r = 0; r < 3; ++r) {
      const int64_t lo = b[static_cast<size_t>(r)], c = b[static_cast<size_t>(r) + 1] - lo;
      parts.push_back(
          optim::Optimizer::create(cfg, ps.slice(lo, Shape{c}), optim::decay_ranges_in(decay, lo, lo + c)));
    }
    for (int step = 0; step < 3; ++step) {
      whole->step(p, g, 0.01);
      for (int r = 0; r < 3; ++r) {
        const int64_t lo = b[static_cast<size_t>(r)], c = b[static_cast<size_t>(r) + 1] - lo;
        parts[static_cast<size_t>(r)]->step(ps.slice(lo, Shape{c}), g.slice(lo, Shape{c}), 0.01);
      }
    }
    EXPECT_EQ(std::memcmp(p.raw(), ps.raw(), p.num_bytes()), 0) << name_of(kind);
    // The state of a shard is its slice of the whole buffer's state.
    for (size_t k = 0; k < whole->state().size(); ++k)
      for (int r = 0; r < 3; ++r) {
        const Tensor part = parts[static_cast<size_t>(r)]->state()[k].second;
        EXPECT_EQ(part.count(), b[static_cast<size_t>(r) + 1] - b[static_cast<size_t>(r)]);
        EXPECT_EQ(std::memcmp(whole->state()[k].second.data<float>() + b[static_cast<size_t>(r)], part.raw(),
                              part.num_bytes()),
                  0);
      }
  }
  EXPECT_EQ(optim::decay_ranges_in(decay, 350, 950).size(), 2u);
  EXPECT_EQ(optim::decay_ranges_in(decay, 350, 950)[0].offset, 0);
  EXPECT_EQ(optim::decay_ranges_in(decay, 350, 950)[0].count, 360);
  EXPECT_EQ(optim::decay_ranges_in(decay, 350, 950)[1].offset, 550);
}

TEST(ZeroGradNorm, IsTheRankOrderedSumOfShardSums) {
  const int64_t n = 12345;
  const Tensor g = filled(n, 3);
  test::FakeComm host(0, 1);
  // One rank: the plain sum of squares (today's definition).
  train::Sharding one(1, 0, 1, n, Device::CPU);
  EXPECT_FALSE(one.active());
  EXPECT_EQ(one.grad_norm(g, host), std::sqrt(backend::sum_squares(g)));
  EXPECT_NE(one.note().find("nothing to shard"), std::string::npos);
  // Unsharded on 4 ranks: the shard sums folded in rank order.
  train::Sharding four(0, 2, 4, n, Device::CPU);
  EXPECT_FALSE(four.active());
  double s = 0;
  for (int q = 0; q < 4; ++q) {
    const int64_t lo = four.bounds()[static_cast<size_t>(q)], hi = four.bounds()[static_cast<size_t>(q) + 1];
    s = q == 0 ? backend::sum_squares(g.slice(lo, Shape{hi - lo}))
               : s + backend::sum_squares(g.slice(lo, Shape{hi - lo}));
  }
  EXPECT_EQ(four.grad_norm(g, host), std::sqrt(s));
  train::Sharding sharded(2, 2, 4, n, Device::CPU);
  EXPECT_TRUE(sharded.active());
  EXPECT_EQ(sharded.lo(), four.bounds()[2]);
  EXPECT_EQ(sharded.hi(), four.bounds()[3]);
}

TEST(ZeroMixedPrecision, Fp32StepsTheShardViewsOfTheModelBuffers) {
  Tensor p = filled(100, 1), g = filled(100, 2);
  train::MixedPrecision mp(Precision::Fp32, Device::CPU, p, g, 32, 64);
  EXPECT_EQ(mp.optimizer_params().count(), 32);
  EXPECT_EQ(mp.optimizer_params().raw(), p.data<float>() + 32);
  EXPECT_EQ(mp.optimizer_grads().raw(), g.data<float>() + 32);
  train::MixedPrecision all(Precision::Fp32, Device::CPU, p, g);
  EXPECT_EQ(all.optimizer_params().count(), 100);
}

// ---- stream order of a sharded step -------------------------------------------------------

const std::vector<int64_t> OFFSETS = {0, 4000, 4010, 70000, 70064, 200000, 200100};

TEST(ZeroStreams, ReduceScattersFollowTheirWritesAndAllGathersPrecedeTheNextForward) {
  const int world = 3;
  Tensor grads(Shape{OFFSETS.back()}, DType::F32), params(Shape{OFFSETS.back()}, DType::F32);
  const std::vector<int64_t> shards = dist::shard_bounds(grads.count(), world);
  struct Started {
    std::string kind;
    int64_t begin, end;
    std::vector<int64_t> bounds;
    size_t after_compute;
  };
  std::vector<Started> started;
  std::vector<std::string> compute;
  struct Write {
    int64_t begin, end;
    size_t at;  // compute op
  };
  std::vector<Write> writes;
  test::FakeComm comm(1, world);
  comm.set_base(grads);
  comm.on_start = [&](const test::FakeComm::Call& c) {
    for (size_t i = 0; i < c.ranges.size(); ++i)
      started.push_back({c.kind, c.ranges[i].first, c.ranges[i].second, c.bounds[i], compute.size()});
  };
  comm.on_device_wait = [&](size_t i) { compute.push_back("wait " + std::to_string(i)); };
  const std::vector<int64_t> cuts(OFFSETS.begin(), OFFSETS.end() - 1);
  dist::GradReducer reducer(comm, grads, 64 * 1024.0, cuts, true, shards);
  ASSERT_TRUE(reducer.sharded());
  reducer.begin();
  for (size_t layer = OFFSETS.size() - 1; layer-- > 0;) {
    writes.push_back({OFFSETS[layer], OFFSETS[layer + 1], compute.size()});
    compute.push_back("backward layer " + std::to_string(layer));
    reducer.on_ready(OFFSETS[layer]);
  }
  reducer.finish();
  const size_t optimizer = compute.size();
  compute.emplace_back("optimizer");
  const size_t scatters = started.size();
  ASSERT_EQ(scatters, reducer.bucket_ranges().size());
  for (size_t i = 0; i < scatters; ++i) {
    const Started& s = started[i];
    EXPECT_EQ(s.kind, "reduce_scatter");
    EXPECT_EQ(s.begin, reducer.bucket_ranges()[i].first);
    EXPECT_EQ(s.bounds, dist::shard_bounds_within(shards, s.begin, s.end)) << "bucket " << i;
    for (const Write& w : writes) {
      if (w.begin < s.end && s.begin < w.end) {
        EXPECT_LT(w.at, s.after_compute) << "bucket " << i << " starts before its gradients";
      }
    }
    const auto w = std::find(compute.begin(), compute.end(), "wait " + std::to_string(i));
    ASSERT_NE(w, compute.end());
    EXPECT_LT(static_cast<size_t>(w - compute.begin()), optimizer);
  }
  EXPECT_LE(started.front().after_compute, writes.back().at) << "no overlap with backward";
  // The all-gathers: one per bucket, lowest offsets first, all queued after the optimizer and
  // before any wait; then the compute stream (the next forward) waits for each.
  comm.set_base(params);
  reducer.allgather_params(params);
  ASSERT_EQ(started.size(), 2 * scatters);
  for (size_t i = scatters; i < started.size(); ++i) {
    EXPECT_EQ(started[i].kind, "allgather_shards");
    EXPECT_EQ(started[i].after_compute, optimizer + 1) << "queued after the optimizer, before any wait";
    if (i > scatters) {
      EXPECT_EQ(started[i].begin, started[i - 1].end) << "forward order";
    }
    EXPECT_EQ(started[i].bounds, dist::shard_bounds_within(shards, started[i].begin, started[i].end));
  }
  EXPECT_EQ(started[scatters].begin, 0);
  EXPECT_EQ(compute.size(), optimizer + 1 + scatters) << "one device wait per all-gather";
  EXPECT_EQ(comm.waits, 0) << "the host never waits";
}

TEST(ZeroStreams, AGroupOfRanksEndsWithEveryShardEverywhere) {
  const int world = 3;
  const int64_t n = 1000;
  test::FakeComm::Group group(world);
  std::vector<std::vector<double>> out(world);
  std::vector<std::thread> ranks;
  ranks.reserve(world);
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      test::FakeComm comm(r, world, &group);
      Tensor t(Shape{n}, DType::F64);
      const std::vector<int64_t> b = dist::shard_bounds(n, world);
      for (int64_t i = 0; i < n; ++i)
        t.data<double>()[i] =
            i >= b[static_cast<size_t>(r)] && i < b[static_cast<size_t>(r) + 1] ? double(i) : -1;
      comm.allgather_shards(t, b);
      out[static_cast<size_t>(r)].assign(t.data<double>(), t.data<double>() + n);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(i)], double(i));
}

// Stage 2 on the CPU: the gradients outside the own shard are zeroed and their pages handed back
// as each bucket completes; the own shard is what the reduction left.
TEST(ZeroStage2, ABucketHandsBackThePagesOutsideTheOwnShard) {
  const int world = 2;
  const int64_t n = 300000;  // ~1.1 MiB of float32: several buckets of 64 KiB and many pages
  Tensor grads = filled(n, 3);
  const std::vector<float> before(grads.data<float>(), grads.data<float>() + n);
  const std::vector<int64_t> shards = dist::shard_bounds(n, world);
  test::FakeComm comm(1, world);
  dist::GradReducer reducer(comm, grads, 64 * 1024.0, {}, true, shards);
  reducer.release_reduced();
  const size_t all = resident_bytes(grads.raw(), grads.num_bytes());
  reducer.begin();
  reducer.on_ready(0);
  reducer.finish();
  // Measured before the values are read: reading a handed-back page maps the kernel's shared zero
  // page, which mincore counts as resident although it costs no memory.
  const int64_t lo = shards[1], hi = shards[2];
  const size_t page = 4096, buckets = static_cast<size_t>(reducer.num_buckets());
  const size_t left = resident_bytes(grads.raw(), grads.num_bytes());
  EXPECT_GE(all, grads.num_bytes());
  // The own half, plus at most a page at each end of the shard and where buckets meet.
  EXPECT_LE(left, static_cast<size_t>(hi - lo) * sizeof(float) + (2 * buckets + 2) * page)
      << "resident before " << all << " after " << left;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(grads.data<float>()[i], i >= lo && i < hi ? before[static_cast<size_t>(i)] : 0.0f) << i;
}

TEST(ZeroStage2, ReleasedRangesReadZeroAndTheEdgesKeepTheirNeighbours) {
  const size_t page = 4096;
  Tensor t(Shape{static_cast<int64_t>(16 * page)}, DType::U8);
  std::memset(t.raw(), 7, t.num_bytes());
  unsigned char* p = t.data<unsigned char>();
  release_zeroed(p + page / 2, 10 * page);  // half a page, 9 whole pages, half a page
  EXPECT_LE(resident_bytes(p, t.num_bytes()), t.num_bytes() - 8 * page)
      << "whole pages inside were handed back";
  for (size_t i = 0; i < t.num_bytes(); ++i)
    ASSERT_EQ(p[i], i >= page / 2 && i < page / 2 + 10 * page ? 0 : 7) << i;
  release_zeroed(p + 3, 5);  // no whole page inside: memset only
  for (size_t i = 3; i < 8; ++i) ASSERT_EQ(p[i], 0);
  EXPECT_EQ(p[2], 7);
  EXPECT_EQ(p[8], 7);
  std::memset(p, 1, t.num_bytes());  // handed-back pages take memory again when written
  EXPECT_GE(resident_bytes(p, t.num_bytes()), t.num_bytes());
}

TEST(ZeroStage2, ZeroGradsClearsTheShardAndHandsBackTheRest) {
  const int64_t n = 100000;
  Tensor grads = filled(n, 5);
  train::Sharding sharding(2, 0, 3, n, Device::CPU);
  ASSERT_TRUE(sharding.keeps_own_grads_only());
  EXPECT_FALSE(train::Sharding(1, 0, 3, n, Device::CPU).keeps_own_grads_only());
  EXPECT_FALSE(train::Sharding(2, 0, 1, n, Device::CPU).keeps_own_grads_only()) << "one rank: unsharded";
  sharding.zero_grads(grads);
  // The shard's pages, plus the partial pages at either end of the buffer (cleared, still held).
  EXPECT_LE(resident_bytes(grads.raw(), grads.num_bytes()),
            static_cast<size_t>(sharding.count()) * sizeof(float) + 4 * 4096);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(grads.data<float>()[i], 0.0f) << i;
}

// The next forward waits for the parameter all-gathers layer by layer: a layer's buckets just
// before it runs, never a later layer's, and all of them by the end of forward.
TEST(ZeroStreams, TheNextForwardWaitsForEachLayersGathersOnly) {
  const int world = 2;
  nn::Model model("flatten linear(64) relu linear(64) relu linear(10)", Shape{1, 8, 8}, DType::F32, 1);
  std::vector<int64_t> cuts;
  for (const nn::ParamInfo& p : model.param_info()) cuts.push_back(p.offset);
  const std::vector<int64_t> shards = dist::shard_bounds(model.num_params(), world);
  test::FakeComm comm(0, world);
  std::vector<std::string> compute;
  comm.on_device_wait = [&](size_t i) { compute.push_back("wait " + std::to_string(i)); };
  dist::GradReducer reducer(comm, model.grads(), 1.0, cuts, true, shards);  // a bucket per tensor
  comm.set_base(model.params());
  reducer.start_allgather(model.params());
  ASSERT_TRUE(reducer.allgather_pending());
  const size_t first_request = comm.requests - static_cast<size_t>(reducer.num_buckets());
  nn::RunCtx rc;
  rc.training = false;
  rc.on_layer = [&](size_t layer, bool, double, double) {
    compute.push_back("layer " + std::to_string(layer));
  };
  Tensor x(Shape{2, 1, 8, 8}, DType::F32);
  model.forward(x, rc, [&](int64_t end) { reducer.params_ready(end); });
  EXPECT_FALSE(reducer.allgather_pending()) << "every gather waited for by the end of forward";
  // Gathers in forward order: request first_request + g covers [lo_g, hi_g); each wait must come
  // after the layers that precede its tensor and before the layer that reads it.
  std::vector<std::pair<int64_t, int64_t>> ranges = reducer.bucket_ranges();
  std::reverse(ranges.begin(), ranges.end());
  ASSERT_EQ(ranges.size(), model.param_info().size());
  for (size_t g = 0; g < ranges.size(); ++g) {
    const auto w = std::find(compute.begin(), compute.end(), "wait " + std::to_string(first_request + g));
    ASSERT_NE(w, compute.end()) << "gather " << g << " never waited for";
    const int reader = model.param_info()[g].layer;  // the layer whose tensor the bucket holds
    const auto layer_at = [&](int l) {
      return std::find(compute.begin(), compute.end(), "layer " + std::to_string(l));
    };
    EXPECT_LT(w, layer_at(reader)) << "gather " << g << " after layer " << reader << " ran";
    if (reader > 0) {
      EXPECT_GT(w, layer_at(reader - 1))
          << "gather " << g << " waited for before layer " << reader - 1 << " ran";
    }
  }
  EXPECT_EQ(comm.waits, 0) << "device waits only";
}

}  // namespace
