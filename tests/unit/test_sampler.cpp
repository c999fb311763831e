// DistributedSampler: disjoint shards whose union is the epoch (dropped or
// masked tail), equal step counts on every rank, order a pure function of
// (seed, epoch), exact resume from any consumed_samples (also with another
// world size and the same global batch), evaluation that counts every sample
// exactly once and sums like a single rank, thread-safe indices().
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <set>
#include <string>
#include <thread>
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
        for (int64_t i : epoch_of(DistributedSampler(n, 8, world, r, 0, false, PadMode::Mask), 0, 8))
          seen.insert(i);
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

namespace {

// The global batches (each rank's part concatenated in rank order) from `from` to the end of `epochs` epochs.
std::vector<int64_t> global_stream(int64_t n, int64_t batch, int world, uint64_t seed, PadMode pad,
                                   hpc::data::SamplerCursor from, int64_t epochs) {
  std::deque<DistributedSampler> ranks;  // not movable (it owns a mutex)
  for (int r = 0; r < world; ++r) ranks.emplace_back(n, batch, world, r, seed, true, pad);
  std::vector<int64_t> out, buf(static_cast<size_t>(batch));
  for (int64_t e = from.epoch; e < epochs; ++e)
    for (int64_t b = e == from.epoch ? from.batch : 0; b < ranks[0].batches_per_epoch(); ++b)
      for (const DistributedSampler& s : ranks) {
        s.indices(e, b, buf.data());
        out.insert(out.end(), buf.begin(), buf.end());
      }
  return out;
}

}  // namespace

TEST(Sampler, ResumeAtAnyConsumedSamplesContinuesTheSameSequence) {
  // A checkpoint stores (seed, epoch, consumed_samples); every position of two epochs, several world sizes.
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {96, 101}) {
      const int64_t batch = 4, g = batch * world;
      const std::vector<int64_t> full = global_stream(n, batch, world, 3, PadMode::Drop, {0, 0}, 2);
      DistributedSampler s(n, batch, world, 0, 3, true, PadMode::Drop);
      for (int64_t epoch : {0, 1})
        for (int64_t consumed = 0; consumed <= s.batches_per_epoch() * g; consumed += g) {
          const hpc::data::SamplerCursor at = s.cursor_at(epoch, consumed);
          const int64_t done = epoch * s.batches_per_epoch() * g + consumed;
          ASSERT_EQ(s.consumed_samples(at) + (at.epoch - epoch) * s.batches_per_epoch() * g, consumed);
          const std::vector<int64_t> tail = global_stream(n, batch, world, 3, PadMode::Drop, at, 2);
          ASSERT_EQ(static_cast<int64_t>(tail.size()), static_cast<int64_t>(full.size()) - done);
          EXPECT_TRUE(std::equal(tail.begin(), tail.end(), full.begin() + done))
              << "world " << world << " n " << n << " epoch " << epoch << " consumed " << consumed;
        }
    }
}

TEST(Sampler, ResumeWithAnotherWorldSizeAndTheSameGlobalBatchIsExact) {
  // Saved by 2 ranks × 12, resumed by 3 × 8, 4 × 6 or 1 × 24: the same samples in the same global batches.
  const std::vector<int64_t> two = global_stream(500, 12, 2, 5, PadMode::Drop, {1, 7}, 3);
  for (auto [world, batch] : {std::pair{3, 8}, std::pair{4, 6}, std::pair{1, 24}}) {
    DistributedSampler s(500, batch, world, 0, 5, true, PadMode::Drop);
    const hpc::data::SamplerCursor at = s.cursor_at(1, 7 * 24);
    EXPECT_EQ(at, (hpc::data::SamplerCursor{1, 7}));
    const std::vector<int64_t> other = global_stream(500, batch, world, 5, PadMode::Drop, at, 3);
    ASSERT_EQ(other.size(), two.size());
    for (size_t b = 0; b < two.size(); b += 24)  // order within a global batch may differ, the set may not
      EXPECT_EQ(std::multiset<int64_t>(two.begin() + b, two.begin() + b + 24),
                std::multiset<int64_t>(other.begin() + b, other.begin() + b + 24));
  }
  // Another global batch continues exactly when the position is a multiple of it, else it is refused.
  DistributedSampler g16(500, 16, 1, 0, 5, true, PadMode::Drop);
  EXPECT_EQ(g16.cursor_at(1, 48), (hpc::data::SamplerCursor{1, 3}));
  try {
    g16.cursor_at(1, 7 * 24);
    ADD_FAILURE() << "a position that is not a whole number of global batches was accepted";
  } catch (const hpc::UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("168 samples of the epoch were consumed, not a whole number of global "
                                   "batches of 16"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(g16.cursor_at(0, 10000), hpc::UserError);
}

TEST(Sampler, MaskedTrainingTailSeesEverySampleOnceWithEqualSteps) {
  // data.drop_last = false: the last global batch is padded with masked rows instead of repeats.
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {96, 100, 101, 7 * 13}) {
      const int64_t batch = 4, g = batch * world;
      std::multiset<int64_t> seen;
      int64_t valid_total = 0;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(n, batch, world, r, 7, true, PadMode::Mask);
        EXPECT_EQ(s.batches_per_epoch(), (n + g - 1) / g) << "all ranks run the same number of steps";
        for (int64_t i : epoch_of(s, 1, batch)) seen.insert(i);
        if (r == 0)
          for (int64_t b = 0; b < s.batches_per_epoch(); ++b) valid_total += s.global_valid(b);
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "world " << world << " n " << n;
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample seen twice";
      EXPECT_EQ(valid_total, n) << "global_valid (the loss normaliser) counts the real samples";
    }
}

TEST(Sampler, DistributedEvaluationSumsEqualASingleRank) {
  // Any per-sample metric summed over valid rows on W ranks equals the single-rank sum.
  auto metric = [](int64_t i) { return 1.0 / double(i + 3); };
  for (int64_t n : {10, 64, 101, 2000}) {
    double single = 0;
    DistributedSampler one(n, 12, 1, 0, 0, false, PadMode::Mask);
    std::vector<int64_t> buf(12);
    for (int64_t b = 0; b < one.batches_per_epoch(); ++b) {
      const int64_t valid = one.indices(0, b, buf.data());
      for (int64_t i = 0; i < valid; ++i) single += metric(buf[i]);
    }
    for (int world : {2, 3, 4}) {
      double sum = 0;
      int64_t count = 0;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(n, 5, world, r, 0, false, PadMode::Mask);
        for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
          const int64_t valid = s.indices(0, b, buf.data());
          count += valid;
          for (int64_t i = 0; i < valid; ++i) sum += metric(buf[i]);
        }
      }
      EXPECT_EQ(count, n);
      EXPECT_NEAR(sum, single, 1e-12 * single) << "n " << n << " world " << world;  // summation order only
    }
  }
}

TEST(Sampler, TooSmallForOneGlobalBatchInEveryTrainingMode) {
  for (PadMode pad : {PadMode::Drop, PadMode::Wrap, PadMode::Mask}) {
    try {
      const DistributedSampler s(10, 4, 3, 0, 0, true, pad, "data file 'tiny.h5': /train");
      ADD_FAILURE() << "10 samples accepted for a global batch of 12";
    } catch (const hpc::UserError& e) {
      EXPECT_STREQ(e.what(),
                   "data file 'tiny.h5': /train has 10 samples, fewer than one global batch of 12 "
                   "(4 per rank × 3 ranks): lower --train.batch_size or --train.accum_steps, or use "
                   "fewer ranks");
    }
  }
  // Evaluation (unshuffled, masked) takes any size: 10 samples on 3 ranks × 4.
  EXPECT_EQ(DistributedSampler(10, 4, 3, 2, 0, false, PadMode::Mask).batches_per_epoch(), 1);
}

TEST(Sampler, ConcurrentCallsAcrossEpochsAgreeWithSequentialOnes) {
  // Loader workers call indices() at once and straddle epoch ends.
  DistributedSampler s(997, 16, 2, 1, 4, true, PadMode::Drop);
  const int64_t per_epoch = s.batches_per_epoch();
  std::vector<std::vector<int64_t>> want(static_cast<size_t>(3 * per_epoch), std::vector<int64_t>(16));
  for (int64_t k = 0; k < 3 * per_epoch; ++k)
    DistributedSampler(997, 16, 2, 1, 4, true, PadMode::Drop)
        .indices(k / per_epoch, k % per_epoch, want[k].data());
  std::vector<std::vector<int64_t>> got(want.size(), std::vector<int64_t>(16));
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t k = t; k < 3 * per_epoch; k += 4) s.indices(k / per_epoch, k % per_epoch, got[k].data());
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, want);
}
