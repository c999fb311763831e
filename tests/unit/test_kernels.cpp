// CPU tests of the GPU's arithmetic that is not covered elsewhere: the
// 16-bit float conversions (kernels/cast_math.h), the loss-scale rule and
// gradient unscaling (kernels/amp_math.h, backend/ops.def); and the
// failure path of backend/cuda/check.h.
//
// The conversions are checked against independent references, exhaustively
// where the space is small: every one of the 65,536 bit patterns of each
// 16-bit type round-trips, and every rounding decision (the exact midpoint
// between each pair of neighbouring 16-bit values, and one float ulp either
// side of it) is compared with the correctly rounded answer — from GCC's
// _Float16 (IEEE half, round to nearest even) and, for bfloat16, from the
// nearest of the two candidates computed exactly in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/rng.h"
#include "kernels/amp_math.h"
#include "kernels/cast_math.h"

namespace hpc::kernels {
namespace {

uint32_t bits(float f) { return float_bits(f); }
bool is_nan_bits16_half(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_nan_bits16_bf16(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// The correctly rounded bfloat16 of f (round to nearest, ties to even), by
// comparing the distances to the two neighbouring bfloat16 values in exact
// double arithmetic.
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t u = bits(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // truncation: toward zero
  if ((u & 0xffffu) == 0) return lo;                   // exactly representable
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // next one away from zero (may be inf)
  const double d = std::fabs(double(f));
  const double dlo = std::fabs(double(bf16_bits_to_float(lo)));
  double dhi = std::fabs(double(bf16_bits_to_float(hi)));
  if (std::isinf(dhi)) dhi = 0x1p128;  // the rounding boundary past the largest finite bfloat16
  const double below = d - dlo, above = dhi - d;
  if (below < above) return lo;
  if (above < below) return hi;
  return (lo & 1u) ? hi : lo;
}

std::vector<float> rounding_probes(float (*decode)(uint16_t), bool (*is_nan)(uint16_t)) {
  std::vector<float> out;
  for (uint32_t b = 0; b < 0xffff; ++b) {
    const uint16_t a = static_cast<uint16_t>(b), c = static_cast<uint16_t>(b + 1);
    if (is_nan(a) || is_nan(c) || (a & 0x7fffu) == 0x7fffu) continue;
    const double x = decode(a), y = decode(c);
    if (std::isinf(x) || std::isinf(y) || std::signbit(x) != std::signbit(y)) continue;
    const float mid = static_cast<float>((x + y) / 2);  // exact: the midpoint has at most 12 significant bits
    out.push_back(mid);
    out.push_back(std::nextafter(mid, 0.0f));
    out.push_back(std::nextafter(mid, mid * 2));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float f :
       {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
        std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(), 65504.0f, 65519.99f,
        65520.0f, -65520.0f, 1e-8f, 5.9604645e-8f, 2.9802322e-8f, 2.98023259e-8f})
    out.push_back(f);
  Rng rng(11);
  for (int i = 0; i < 200000; ++i) {  // random bit patterns: every exponent, including subnormal floats
    const uint32_t u = static_cast<uint32_t>(rng.next_u64());
    out.push_back(bits_float(u));
  }
  return out;
}

TEST(Bf16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t in = static_cast<uint16_t>(b);
    const uint16_t out = float_to_bf16_bits(bf16_bits_to_float(in));
    if (is_nan_bits16_bf16(in))
      EXPECT_TRUE(is_nan_bits16_bf16(out)) << std::hex << b;
    else
      EXPECT_EQ(out, in) << std::hex << b;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  int64_t checked = 0;
  for (float f : rounding_probes(bf16_bits_to_float, is_nan_bits16_bf16)) {
    const uint16_t got = float_to_bf16_bits(f), want = bf16_reference(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(is_nan_bits16_bf16(got));
      continue;
    }
    ASSERT_EQ(got, want) << "f = " << f << " (bits " << std::hex << bits(f) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 300000);
  EXPECT_EQ(float_to_bf16_bits(1.00390625f), 0x3f80u);  // 1 + 2^-8: a tie, rounds to even (1.0)
  EXPECT_EQ(float_to_bf16_bits(1.01171875f), 0x3f82u);  // 1 + 3·2^-8: a tie, rounds to even (up)
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);  // past the last bf16: inf
}

// The reference is the compiler's _Float16: GCC has it on x86-64 (the build), clang
// only from version 15, so clang-tidy 14 (make lint) reads this file without them.
#ifdef __FLT16_MAX__
TEST(Half, EveryPatternRoundTripsAndMatchesFloat16) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t in = static_cast<uint16_t>(b);
    _Float16 h;
    std::memcpy(&h, &in, 2);
    const float f = half_bits_to_float(in);
    if (is_nan_bits16_half(in)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(is_nan_bits16_half(float_to_half_bits(f)));
      continue;
    }
    ASSERT_EQ(bits(f), bits(static_cast<float>(h))) << std::hex << b;
    ASSERT_EQ(float_to_half_bits(f), in) << std::hex << b;
  }
}

TEST(Half, RoundsLikeFloat16) {
  int64_t checked = 0;
  for (float f : rounding_probes(half_bits_to_float, is_nan_bits16_half)) {
    const uint16_t got = float_to_half_bits(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(is_nan_bits16_half(got));
      continue;
    }
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(got, want) << "f = " << f << " (bits " << std::hex << bits(f) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 300000);
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bffu);  // just below the midpoint to inf: the largest half
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00u);  // the midpoint rounds to even: inf
}
#endif

TEST(Storage16, ConversionsAndComparisons) {
  EXPECT_EQ(float(Bf16(3.0)), 3.0f);
  EXPECT_EQ(float(Half(-0.5f)), -0.5f);
  EXPECT_EQ(double(Half(1)), 1.0);
  EXPECT_TRUE(Bf16(2.0f) > Bf16(1.0f));
  EXPECT_TRUE(Half(-2.0f) < Half(1.0f));
  EXPECT_TRUE(Bf16(1.0f) == Bf16(1.001f));  // both round to 1.0 in bf16
  EXPECT_EQ(Half::from_bits(0x3c00).bits, Half(1.0f).bits);
  static_assert(std::is_same_v<compute_t<double>, double> && std::is_same_v<compute_t<Bf16>, float>);
}

TEST(LossScale, FollowsGradScalerRule) {
  LossScale s;
  EXPECT_EQ(s.scale, 65536.0f);
  update_loss_scale(s, true);  // overflow: halve, start counting again
  EXPECT_EQ(s.scale, 32768.0f);
  EXPECT_EQ(s.good_steps, 0);
  for (int i = 0; i < 1999; ++i) update_loss_scale(s, false);
  EXPECT_EQ(s.scale, 32768.0f);
  EXPECT_EQ(s.good_steps, 1999);
  update_loss_scale(s, false);  // the 2000th finite step doubles it
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_EQ(s.good_steps, 0);
  for (int i = 0; i < 1000; ++i) update_loss_scale(s, false);
  update_loss_scale(s, true);  // an overflow resets the count of finite steps
  EXPECT_EQ(s.scale, 32768.0f);
  EXPECT_EQ(s.good_steps, 0);

  LossScale big;
  big.scale = std::numeric_limits<float>::max();
  big.growth_interval = 1;
  update_loss_scale(big, false);  // growing would overflow to inf: keep the scale
  EXPECT_EQ(big.scale, std::numeric_limits<float>::max());
  EXPECT_EQ(big.good_steps, 0);
}

TEST(Unscale, ScalesAndCountsNonFinite) {
  bool finite = false;
  EXPECT_EQ(unscale_grad(1024.0f, 1.0f / 1024, finite), 1.0f);
  EXPECT_TRUE(finite);
  unscale_grad(std::numeric_limits<float>::infinity(), 0.5f, finite);
  EXPECT_FALSE(finite);
  unscale_grad(std::nanf(""), 0.5f, finite);
  EXPECT_FALSE(finite);

  Tensor g(Shape{6}, DType::F32), out(Shape{6}, DType::F32);
  const float v[6] = {2.0f, -4.0f, 0.0f, std::numeric_limits<float>::infinity(), 8.0f, std::nanf("")};
  std::memcpy(g.raw(), v, sizeof v);
  EXPECT_EQ(backend::unscale_grads(g, out, 0.5), 2);
  EXPECT_EQ(out.data<float>()[0], 1.0f);
  EXPECT_EQ(out.data<float>()[1], -2.0f);
  EXPECT_EQ(out.data<float>()[4], 4.0f);
  EXPECT_EQ(backend::count_nonfinite(g), 2);
  EXPECT_EQ(backend::count_nonfinite(out), 2);
}

// check.h's failure path, where it can be provoked: a CUDA build on a machine
// without a GPU (or driver) fails any call that needs the device.
TEST(CudaCheck, AFailedCallIsOneLineAndEndsTheProcess) {
  if (!backend::cuda_built() || backend::cuda_device_count() > 0)
    GTEST_SKIP() << "needs a CUDA build on a machine without a GPU";
  EXPECT_EXIT(
      backend::device_synchronize(), ::testing::ExitedWithCode(1),
      "^hpctrain: error on rank -?[0-9]+ \\([^,]+, cuda:-?[0-9]+\\): CUDA call cudaDeviceSynchronize\\(\\) "
      "failed: .+ \\(src/backend/cuda/device.cpp:[0-9]+\\)\n$");
}

}  // namespace
}  // namespace hpc::kernels
