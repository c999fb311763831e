// DistributedSampler: disjoint shards whose union is the epoch, equal step
// counts on every rank, order a pure function of (seed, epoch), exact resume,
// and evaluation that counts every sample exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/sampler.h"

using hpc::data::DistributedSampler;
using hpc::data::PadMode;

namespace {

// All indices rank r sees in one epoch, in order.
std::vector<int64_t> epoch_of(const DistributedSampler& s, int64_t epoch, int64_t batch) {
  std::vector<int64_t> out, buf(static_cast<size_t>(batch));
  for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
    int64_t valid = s.indices(epoch, b, buf.data());
    out.insert(out.end(), buf.begin(), buf.begin() + valid);
  }
  return out;
}

}  // namespace

TEST(Sampler, ShardsAreDisjointAndCoverTheEpoch) {
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {96, 100, 101, 7 * 13}) {
      const int64_t batch = 4;
      std::multiset<int64_t> seen;
      int64_t steps = -1;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(n, batch, world, r, 7, true, PadMode::Drop);
        if (steps < 0) steps = s.batches_per_epoch();
        EXPECT_EQ(s.batches_per_epoch(), steps) << "all ranks run the same number of steps";
        for (int64_t i : epoch_of(s, 0, batch)) seen.insert(i);
      }
      const int64_t g = batch * world;
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n / g * g) << "world " << world << " n " << n;
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample seen twice";
      for (int64_t i : seen) EXPECT_TRUE(0 <= i && i < n);
    }
}

TEST(Sampler, OrderDependsOnEpochAndSeedOnly) {
  DistributedSampler a(1000, 10, 1, 0, 1, true, PadMode::Drop), b(1000, 10, 1, 0, 1, true, PadMode::Drop);
  DistributedSampler c(1000, 10, 1, 0, 2, true, PadMode::Drop);
  EXPECT_EQ(epoch_of(a, 3, 10), epoch_of(b, 3, 10));
  EXPECT_NE(epoch_of(a, 3, 10), epoch_of(a, 4, 10));
  EXPECT_NE(epoch_of(a, 3, 10), epoch_of(c, 3, 10));
}

TEST(Sampler, ResumeAtAnyBatchContinuesTheSameSequence) {
  DistributedSampler fresh(500, 8, 2, 1, 5, true, PadMode::Drop);
  std::vector<int64_t> full = epoch_of(fresh, 2, 8);
  for (int64_t start : {0, 1, 17, 30}) {
    DistributedSampler resumed(500, 8, 2, 1, 5, true, PadMode::Drop);  // a new process after a restart
    std::vector<int64_t> tail, buf(8);
    for (int64_t b = start; b < resumed.batches_per_epoch(); ++b) {
      resumed.indices(2, b, buf.data());
      tail.insert(tail.end(), buf.begin(), buf.end());
    }
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), full.begin() + start * 8));
  }
}

TEST(Sampler, SameGlobalBatchAcrossWorldSizes) {
  // 2 ranks × 16 and 4 ranks × 8 see the same set of samples in every global batch.
  for (int64_t b = 0; b < 5; ++b) {
    std::multiset<int64_t> two, four;
    std::vector<int64_t> buf(16);
    for (int r = 0; r < 2; ++r) {
      DistributedSampler(300, 16, 2, r, 9, true, PadMode::Drop).indices(1, b, buf.data());
      two.insert(buf.begin(), buf.begin() + 16);
    }
    for (int r = 0; r < 4; ++r) {
      DistributedSampler(300, 8, 4, r, 9, true, PadMode::Drop).indices(1, b, buf.data());
      four.insert(buf.begin(), buf.begin() + 8);
    }
    EXPECT_EQ(two, four);
  }
}

TEST(Sampler, EvaluationCountsEverySampleOnce) {
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {10, 64, 101}) {
      std::multiset<int64_t> seen;
      for (int r = 0; r < world; ++r)
        for (int64_t i : epoch_of(DistributedSampler(n, 8, world, r, 0, false, PadMode::Mask), 0, 8)) seen.insert(i);
      ASSERT_EQ(static_cast<int64_t>(seen.size()), n);
      int64_t expect = 0;
      for (int64_t i : seen) EXPECT_EQ(i, expect++);
    }
}

TEST(Sampler, WrapPadsWithRealSamples) {
  DistributedSampler s(10, 4, 1, 0, 3, true, PadMode::Wrap);
  EXPECT_EQ(s.batches_per_epoch(), 3);
  std::vector<int64_t> buf(4);
  EXPECT_EQ(s.indices(0, 2, buf.data()), 4);
}

TEST(Sampler, DatasetSmallerThanOneGlobalBatchIsAUserError) {
  EXPECT_THROW(DistributedSampler(10, 8, 2, 0, 0, true, PadMode::Drop), hpc::UserError);
}
