// The CPU backend's float32 exp (backend/cpu/isa/generic.h's exp_ref, and the
// vector bodies' exp8 that must equal it) and the ops built on it: accuracy of
// exp_ref against double-precision exp over the whole clamped range, NaN and
// range ends, exp8 bit for bit exp_ref's, GELU forward/backward in float32
// against the float64 reference of kernels/activation_math.h, the attention
// softmax against a float64 softmax, and that the tail of a loop (n not a
// multiple of 8) gives bitwise what the vector body gives.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/isa/generic.h"
#include "backend/ops.h"
#include "core/rng.h"
#include "kernels/activation_math.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "backend/cpu/isa/avx2_math.h"
#endif

namespace hpc::backend {
namespace {

using cpu::generic::exp_ref;

// Error in units of the last place of the correctly rounded float result.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = double(std::nextafter(w, std::numeric_limits<float>::infinity())) - double(w);
  return std::abs(double(got) - want) / ulp;
}

// Every 997th float bit pattern that lies in [-87.3, 88.3] (~2 million
// values; all 2.2·10⁹ were checked once: max 1.023 ulp). 1.5 ulp leaves room
// for a different but still faithful rounding of the last operations.
TEST(CpuVecMath, ExpWithinOneAndAHalfUlps) {
  if (!cpu::generic::BASELINE_FMA) GTEST_SKIP() << "a build without FMA rounds exp_ref's multiply-adds twice";
  double worst = 0;
  float worst_x = 0;
  int64_t n = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 997) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (!(x >= -87.3f && x <= 88.3f)) continue;
    const double e = ulps(exp_ref(x), std::exp(double(x)));
    if (e > worst) worst = e, worst_x = x;
    ++n;
  }
  EXPECT_LE(worst, 1.5) << "at x = " << worst_x << " (" << n << " values checked)";
  EXPECT_EQ(exp_ref(0.0f), 1.0f);
  EXPECT_EQ(exp_ref(1.0f), std::exp(1.0f));
}

TEST(CpuVecMath, ExpRangeEndsAndNaN) {
  EXPECT_TRUE(std::isnan(exp_ref(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_LT(exp_ref(-1000.0f), 1e-37f);  // clamped: ~1e-38, not 0
  EXPECT_GE(exp_ref(-1000.0f), 0.0f);
  EXPECT_LT(exp_ref(-std::numeric_limits<float>::infinity()), 1e-37f);
  EXPECT_TRUE(std::isfinite(exp_ref(1000.0f)));  // clamped: 2.2e38, not inf
  EXPECT_GT(exp_ref(1000.0f), 1e38f);
}

#if defined(__AVX2__) && defined(__FMA__)
// The AVX2 kernels' exp8 is exp_ref lane by lane, bit for bit (and so are the tables' GELU,
// softmax and cross-entropy: tests/unit/test_cpu_isa.cpp), on the same values and the ends.
TEST(CpuVecMath, Exp8IsExpRefBitForBit) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1e-30f,
                           -87.3f,
                           88.3f,
                           -1000.0f,
                           1000.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 997) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (x >= -100.0f && x <= 100.0f) xs.push_back(x);
  }
  while (xs.size() % 8 != 0) xs.push_back(0.5f);
  int64_t differ = 0;
  for (size_t i = 0; i < xs.size(); i += 8) {
    alignas(32) float out[8];
    _mm256_store_ps(out, cpu::avx2::exp8(_mm256_loadu_ps(xs.data() + i)));
    for (size_t l = 0; l < 8; ++l) {
      const float want = exp_ref(xs[i + l]);
      differ += std::bit_cast<uint32_t>(out[l]) != std::bit_cast<uint32_t>(want);
      if (differ == 1 && std::bit_cast<uint32_t>(out[l]) != std::bit_cast<uint32_t>(want))
        ADD_FAILURE() << "exp8(" << xs[i + l] << ") = " << out[l] << ", exp_ref " << want;
    }
  }
  EXPECT_EQ(differ, 0) << "of " << xs.size() << " values";
}
#endif

// float32 GELU (vectorised where AVX2 is built in) against the float64
// formula: within a few float roundings of the value and of the gradient.
TEST(CpuVecMath, GeluFloatMatchesDoubleReference) {
  const int64_t n = 4099;  // not a multiple of 8: the tail is covered
  Tensor x(Shape{n}, DType::F32), dy(Shape{n}, DType::F32), y(Shape{n}, DType::F32), dx(Shape{n}, DType::F32);
  Rng rng(7, 1);
  for (int64_t i = 0; i < n; ++i) {
    x.data<float>()[i] = float(-12 + 24 * rng.uniform());
    dy.data<float>()[i] = float(-1 + 2 * rng.uniform());
  }
  activation_forward(kernels::ActivationKind::Gelu, x, y);
  activation_backward(kernels::ActivationKind::Gelu, x, y, dy, dx);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x.data<float>()[i], g = dy.data<float>()[i];
    const double want_y = kernels::gelu_forward(v), want_dx = kernels::gelu_backward(v, g);
    ASSERT_NEAR(y.data<float>()[i], want_y, 1e-7 + 4e-7 * std::abs(want_y)) << "x = " << v;
    ASSERT_NEAR(dx.data<float>()[i], want_dx, 1e-7 + 2e-6 * std::abs(g)) << "x = " << v;
  }
}

// The same value computed in the vector body and in the padded tail is the same bits.
TEST(CpuVecMath, TailEqualsBody) {
  Tensor x(Shape{13}, DType::F32), y(Shape{13}, DType::F32);
  for (int64_t i = 0; i < 13; ++i) x.data<float>()[i] = 0.37f * float(i % 5) - 0.6f;
  activation_forward(kernels::ActivationKind::Gelu, x, y);
  for (int64_t i = 5; i < 13; ++i) EXPECT_EQ(y.data<float>()[i], y.data<float>()[i - 5]) << i;
}

// The causal softmax in float32 against a float64 softmax of the same float scores.
TEST(CpuVecMath, AttentionSoftmaxMatchesDouble) {
  const int64_t b = 1, t = 21, heads = 1, d = 5, c = heads * d;
  Tensor qkv(Shape{b, t, 3 * c}, DType::F32), probs(Shape{b, heads, t, t}, DType::F32),
      out(Shape{b, t, c}, DType::F32);
  Rng rng(9, 2);
  for (int64_t i = 0; i < qkv.count(); ++i) qkv.data<float>()[i] = float(-3 + 6 * rng.uniform());
  attention_forward(qkv, heads, heads, probs, out);
  const float* q = qkv.data<float>();
  for (int64_t i = 0; i < t; ++i) {
    std::vector<double> s(size_t(i + 1));
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      float dot = 0;
      for (int64_t k = 0; k < d; ++k) dot += q[i * 3 * c + k] * q[j * 3 * c + c + k];
      s[size_t(j)] = double(dot) / std::sqrt(double(d));
      mx = std::max(mx, s[size_t(j)]);
    }
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (int64_t j = 0; j < t; ++j) {
      const double want = j <= i ? s[size_t(j)] / sum : 0.0;
      ASSERT_NEAR(probs.data<float>()[i * t + j], want, 1e-6) << "row " << i << " column " << j;
    }
  }
}

}  // namespace
}  // namespace hpc::backend
