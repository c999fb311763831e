// Stage partition (train/stage_partition.h): balanced cuts at block
// boundaries on uneven costs, against a brute force over every cut; the
// explicit dist.pp_split; the round robin of interleaved chunks; the
// start-up lines; bad input as one-line UserErrors.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/stage_partition.h"

using hpc::UserError;
using namespace hpc::train;

namespace {

// embed, `blocks` blocks of the given costs, ln_f, head.
std::vector<LayerCost> model(const std::vector<double>& block_flops, double embed = 1, double head = 4) {
  std::vector<LayerCost> layers = {{"embed", embed, 10, 1000, false}};
  for (double f : block_flops) layers.push_back({"block", f, 100, 200000, true});
  layers.push_back({"ln_f", 0.5, 1, 100, false});
  layers.push_back({"head", head, 50, 0, false});
  return layers;
}

// The smallest largest piece over every cut of the blocks into `pieces`.
double brute_force(const std::vector<LayerCost>& layers, int pieces) {
  std::vector<int> starts;  // block starts but the first
  bool seen = false;
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    if (layers[i].is_block && seen) starts.push_back(i);
    seen = seen || layers[i].is_block;
  }
  double best = 1e300;
  std::vector<int> cut;
  std::function<void(size_t)> go = [&](size_t from) {
    if (static_cast<int>(cut.size()) == pieces - 1) {
      std::vector<int> b = {0};
      b.insert(b.end(), cut.begin(), cut.end());
      b.push_back(static_cast<int>(layers.size()));
      double worst = 0;
      for (size_t k = 0; k + 1 < b.size(); ++k) {
        double c = 0;
        for (int i = b[k]; i < b[k + 1]; ++i) c += layers[i].flops;
        worst = std::max(worst, c);
      }
      best = std::min(best, worst);
      return;
    }
    for (size_t s = from; s < starts.size(); ++s) {
      cut.push_back(starts[s]);
      go(s + 1);
      cut.pop_back();
    }
  };
  go(0);
  return best;
}

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

double largest(const StagePartition& p) {
  double m = 0;
  for (const StagePiece& piece : p.pieces) m = std::max(m, piece.flops);
  return m;
}

}  // namespace

TEST(StagePartition, BalancedCutsMatchABruteForceOnUnevenCosts) {
  const auto layers = model({3, 9, 2, 2, 7, 1, 5, 4, 8, 2}, 6, 11);
  for (int pieces : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE(pieces);
    const StagePartition p = partition_balanced(layers, pieces, 1);
    ASSERT_EQ(static_cast<int>(p.pieces.size()), pieces);
    EXPECT_EQ(largest(p), brute_force(layers, pieces));
    // Contiguous, covering, non-empty, starting at a block (but the first).
    EXPECT_EQ(p.pieces.front().first, 0);
    EXPECT_EQ(p.pieces.back().last, static_cast<int>(layers.size()));
    for (size_t k = 0; k < p.pieces.size(); ++k) {
      EXPECT_GT(p.pieces[k].blocks, 0);
      if (k > 0) {
        EXPECT_EQ(p.pieces[k].first, p.pieces[k - 1].last);
        EXPECT_TRUE(layers[p.pieces[k].first].is_block);
      }
    }
  }
}

TEST(StagePartition, EmbeddingAndHeadCount) {
  // Four equal blocks; a heavy head pushes the last cut earlier: embed+2 | 1 | 1+head.
  const auto layers = model({4, 4, 4, 4}, 1, 8);
  const StagePartition p = partition_balanced(layers, 2, 1);
  EXPECT_EQ(p.pieces[0].blocks, 3);  // embed(1)+12 = 13 vs 4+0.5+8 = 12.5
  EXPECT_EQ(p.pieces[1].blocks, 1);
  EXPECT_DOUBLE_EQ(p.pieces[1].flops, 12.5);
}

TEST(StagePartition, ModelWithoutBlocksCutsAnywhere) {
  std::vector<LayerCost> layers;
  for (double f : {5.0, 1.0, 1.0, 1.0, 5.0}) layers.push_back({"linear", f, 1, 10, false});
  const StagePartition p = partition_balanced(layers, 3, 1);
  EXPECT_EQ(largest(p), 5.0);
  EXPECT_EQ(p.pieces[1].first, 1);
  EXPECT_EQ(p.pieces[1].last, 4);
}

TEST(StagePartition, InterleavedChunksGoRoundRobin) {
  const auto layers = model(std::vector<double>(8, 2.0), 0, 0);
  const StagePartition p = partition_balanced(layers, 2, 2);
  ASSERT_EQ(p.pieces.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(p.pieces[k].stage, k % 2);
    EXPECT_EQ(p.pieces[k].chunk, k / 2);
    EXPECT_EQ(p.pieces[k].blocks, 2);
  }
  EXPECT_EQ(&p.piece(1, 1), &p.pieces[3]);
}

TEST(StagePartition, ExplicitSplit) {
  const auto layers = model(std::vector<double>(12, 1.0));
  const StagePartition p = partition_explicit(layers, "3,3,3,3", 4, 1);
  // Layers: 0 embed, 1..12 blocks, 13 ln_f, 14 head.
  const std::vector<std::pair<int, int>> want = {{0, 4}, {4, 7}, {7, 10}, {10, 15}};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(p.piece(s, 0).first, want[s].first);
    EXPECT_EQ(p.piece(s, 0).last, want[s].second);
    EXPECT_EQ(p.piece(s, 0).blocks, 3);
  }
  const StagePartition uneven = partition_explicit(layers, "5,1,4,2", 2, 2);
  EXPECT_EQ(uneven.piece(0, 1).blocks, 4);
  EXPECT_EQ(uneven.piece(1, 0).first, 6);
}

TEST(StagePartition, StartupLines) {
  std::vector<LayerCost> layers = {{"embed", 2, 0, 600000, false}};
  for (int i = 0; i < 4; ++i) layers.push_back({"block", 3, 0, 300000, true});
  layers.push_back({"ln_f", 0, 0, 0, false});
  layers.push_back({"head", 4, 0, 0, false});
  const auto lines = describe_stages(partition_explicit(layers, "3,1", 2, 1), layers);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "stage 0: layers 0–3 (embed, 3 blocks), 1.5 M parameters, est. 61% of a step");
  EXPECT_EQ(lines[1], "stage 1: layers 4–6 (1 block, ln_f, head), 300.0 k parameters, est. 39% of a step");
  const auto two = describe_stages(partition_explicit(layers, "1,1,1,1", 2, 2), layers);
  EXPECT_EQ(two[0], "stage 0: layers 0–1, 3 (embed, 2 blocks), 1.2 M parameters, est. 44% of a step");
}

TEST(StagePartition, BadInputIsOneLineUserError) {
  const auto layers = model(std::vector<double>(6, 1.0));
  EXPECT_EQ(user_error([&] { partition_balanced(layers, 4, 2); }),
            "the model has 6 blocks, fewer than dist.pp × dist.pp_virtual = 4 × 2 pipeline pieces");
  EXPECT_EQ(user_error([&] { partition_explicit(layers, "3,2", 2, 1); }),
            "dist.pp_split = 3,2 sums to 5 blocks, the model has 6");
  EXPECT_EQ(user_error([&] { partition_explicit(layers, "6,0", 2, 1); }),
            "dist.pp_split = 6,0 leaves piece 1 (stage 1) without blocks");
  EXPECT_EQ(user_error([&] { partition_explicit(layers, "2,2,2", 2, 1); }),
            "dist.pp_split = 2,2,2 has 3 entries, dist.pp × dist.pp_virtual = 2 pieces need one each");
  EXPECT_EQ(user_error([&] { partition_explicit(layers, "3,x", 2, 1); }),
            "dist.pp_split = 3,x is not a comma-separated list of block counts");
  EXPECT_EQ(user_error([&] { partition_explicit(layers, "3,-3,6", 3, 1); }),
            "dist.pp_split = 3,-3,6 is not a comma-separated list of block counts");
  std::vector<LayerCost> flat = {{"linear", 1, 1, 1, false}};
  EXPECT_EQ(user_error([&] { partition_explicit(flat, "1", 1, 1); }),
            "dist.pp_split counts transformer blocks, and this model has none");
  EXPECT_EQ(user_error([&] { partition_balanced(flat, 2, 1); }),
            "the model has 1 layers, fewer than dist.pp × dist.pp_virtual = 2 × 1 pipeline pieces");
}
