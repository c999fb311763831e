// data.augment (data/augment.h): parsing, and the transformation — a pure
// function of (seed, epoch, sample index) that differs across epochs and
// samples, keeps every value of the image (flip) or shifts it in with the
// padding (crop), and is the identity when off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/augment.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::UserError;
using hpc::data::Augment;
using hpc::data::augment_batch;
using hpc::data::parse_augment;

namespace {

constexpr int64_t C = 2, H = 6, W = 5;

// `n` distinct images: value = sample·1000 + position + 1 (never the padding value 0).
Tensor images(int64_t n) {
  Tensor x(Shape{n, C, H, W}, DType::F32);
  for (int64_t i = 0; i < x.count(); ++i) {
    const int64_t value = (i / (C * H * W)) * 1000 + i % (C * H * W) + 1;
    x.data<float>()[i] = static_cast<float>(value);
  }
  return x;
}

std::vector<float> row(const Tensor& x, int64_t i) {
  const float* p = x.data<float>() + i * C * H * W;
  return {p, p + C * H * W};
}

// Sample `index` alone, augmented in `epoch`.
std::vector<float> one(const Augment& a, int64_t index, int64_t epoch, uint64_t seed = 42) {
  Tensor x = images(1);
  augment_batch(a, x, &index, 1, seed, epoch, 0.0f);
  return row(x, 0);
}

}  // namespace

TEST(Augment, Parses) {
  EXPECT_FALSE(parse_augment("").any());
  EXPECT_FALSE(parse_augment("none").any());
  Augment a = parse_augment("flip, crop:4");
  EXPECT_TRUE(a.flip);
  EXPECT_EQ(a.crop, 4);
  EXPECT_EQ(a.str(), "flip, crop:4");
  EXPECT_EQ(parse_augment("crop:2 flip").str(), "flip, crop:2");
  EXPECT_THROW(parse_augment("flop"), UserError);
  EXPECT_THROW(parse_augment("crop:0"), UserError);
  EXPECT_THROW(parse_augment("crop:x"), UserError);
  EXPECT_THROW(parse_augment("crop:"), UserError);
  EXPECT_THROW(hpc::data::check_augment(a, Shape{784}, "/train"), UserError);
  EXPECT_NO_THROW(hpc::data::check_augment(a, Shape{1, 28, 28}, "/train"));
}

TEST(Augment, IdentityWhenOff) {
  Tensor x = images(4);
  const std::vector<float> before(x.data<float>(), x.data<float>() + x.count());
  std::vector<int64_t> idx = {0, 1, 2, 3};
  augment_batch(Augment{}, x, idx.data(), 4, 42, 3, 0.0f);
  EXPECT_EQ(before, std::vector<float>(x.data<float>(), x.data<float>() + x.count()));
}

TEST(Augment, PureFunctionOfSeedEpochAndSample) {
  const Augment a = parse_augment("flip, crop:2");
  // The same (seed, epoch, index) in another batch position, another batch size: the same image.
  Tensor x = images(3);
  std::vector<int64_t> idx = {9, 5, 7};
  augment_batch(a, x, idx.data(), 3, 42, 1, 0.0f);
  Tensor single = images(1);
  int64_t five = 5;
  // Sample 5 sits in row 1 of `x` (values 1000…); copy row 1's source into a one-row batch.
  const Tensor two = images(2);
  std::copy(two.data<float>() + C * H * W, two.data<float>() + 2 * C * H * W, single.data<float>());
  augment_batch(a, single, &five, 1, 42, 1, 0.0f);
  EXPECT_EQ(row(x, 1), row(single, 0));
}

TEST(Augment, DiffersAcrossEpochsAndSamples) {
  const Augment a = parse_augment("flip, crop:4");
  std::set<std::vector<float>> over_epochs, over_seeds;
  for (int64_t e = 0; e < 16; ++e) over_epochs.insert(one(a, 3, e));
  EXPECT_GE(over_epochs.size(), 12u) << "sample 3 looks the same in most epochs";
  for (uint64_t s = 0; s < 16; ++s) over_seeds.insert(one(a, 3, 0, s));
  EXPECT_GE(over_seeds.size(), 12u);
  // Different samples get different transformations: compare where each sample's pixel 1 lands.
  std::set<int64_t> where;
  for (int64_t i = 0; i < 32; ++i) {
    const std::vector<float> r = one(a, i, 0);
    where.insert(std::find(r.begin(), r.end(), 1.0f) - r.begin());
  }
  EXPECT_GE(where.size(), 6u);
}

TEST(Augment, FlipMirrorsAndCropShiftsInPadding) {
  const std::vector<float> src = row(images(1), 0);
  bool saw_flip = false, saw_shift = false;
  for (int64_t e = 0; e < 32; ++e) {
    const std::vector<float> f = one(parse_augment("flip"), 0, e);
    if (f != src) {
      saw_flip = true;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t x = 0; x < W; ++x)
            ASSERT_EQ(f[(c * H + y) * W + x], src[(c * H + y) * W + (W - 1 - x)]);
    }
    const std::vector<float> k = one(parse_augment("crop:1"), 0, e);
    // A shift by at most 1: every value is the padding (0) or one of the source's, ≤ 1 row/column away.
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const float v = k[(c * H + y) * W + x];
          if (v == 0) continue;
          const int64_t at = static_cast<int64_t>(v) - 1;  // flat source position
          ASSERT_EQ(at / (H * W), c);
          ASSERT_LE(std::abs(at % (H * W) / W - y), 1);
          ASSERT_LE(std::abs(at % W - x), 1);
        }
    if (k != src) saw_shift = true;
  }
  EXPECT_TRUE(saw_flip);
  EXPECT_TRUE(saw_shift);
}
