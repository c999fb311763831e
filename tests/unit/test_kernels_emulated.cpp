// The CUDA kernels' bodies, run on the CPU: every kernel in kernels/*.cu is a
// grid-stride loop around one per-element function from kernels/*_math.h.
// These tests call those functions for every index, exactly as the GPU's
// threads would, and compare with the CPU backend's op on the same input.
// That checks the GPU's index arithmetic (im2col's and col2im's gathers,
// pooling windows, channel indexing) and its arithmetic without a GPU.
//
// Where the GPU body adds the same terms in the same order as the CPU loop
// (lowering, pooling, dropout, per-channel finalisation) the comparison is
// bitwise; where the CPU's compiler may contract a·b + c into an FMA
// differently, it is within a few float ulps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/ops_core.h"
#include "backend/ops_nn.h"
#include "core/rng.h"
#include "kernels/cast_math.h"
#include "kernels/conv_math.h"
#include "kernels/dropout_math.h"
#include "kernels/loss_math.h"
#include "kernels/norm_math.h"
#include "kernels/pool_math.h"

namespace hpc::kernels {
namespace {

Tensor random(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t(s, DType::F32);
  Rng rng(seed, 3);
  for (int64_t i = 0; i < t.count(); ++i) t.data<float>()[i] = float(lo + (hi - lo) * rng.uniform());
  return t;
}

// Small integers: many equal values, so max pooling's tie-breaking is exercised.
Tensor random_ints(const Shape& s, uint64_t seed) {
  Tensor t(s, DType::F32);
  Rng rng(seed, 5);
  for (int64_t i = 0; i < t.count(); ++i) t.data<float>()[i] = float(rng.below(4));
  return t;
}

void expect_bitwise(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.count(), want.count());
  for (int64_t i = 0; i < got.count(); ++i)
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << what << " element " << i;
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, const char* what) {
  ASSERT_EQ(got.count(), want.count());
  for (int64_t i = 0; i < got.count(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    ASSERT_LE(std::abs(g - w), 1e-7 + rtol * std::abs(w)) << what << " element " << i;
  }
}

struct ConvCase {
  int64_t n, c, h, w, k, stride, pad;
};

backend::ConvGeometry geometry(const ConvCase& cc) { return {cc.c, cc.h, cc.w, cc.k, cc.stride, cc.pad}; }

ConvShape shape_of(const ConvCase& cc) {
  const backend::ConvGeometry g = geometry(cc);
  return {cc.n, cc.c, cc.h, cc.w, cc.k, cc.stride, cc.pad, g.out_height(), g.out_width()};
}

// The CPU has a fast path for stride 1 with "same" width and a general path; both are covered.
const ConvCase CONV_CASES[] = {
    {2, 3, 6, 6, 3, 1, 1},  // same width (the CPU's block-copy path)
    {2, 2, 7, 5, 3, 2, 1},  // strided, padded, not square
    {3, 2, 5, 5, 1, 2, 0},  // 1x1 projection with stride
    {1, 2, 6, 6, 5, 1, 0},  // large kernel, no padding
    {2, 1, 4, 6, 2, 2, 0},  // kernel = stride
    {2, 2, 5, 5, 3, 3, 2},  // stride 3 with pad 2: taps skipped on both sides
};

TEST(EmulatedKernels, Im2colMatchesCpu) {
  for (const ConvCase& cc : CONV_CASES) {
    const backend::ConvGeometry g = geometry(cc);
    const ConvShape s = shape_of(cc);
    const Tensor x = random(Shape{cc.n, cc.c, cc.h, cc.w}, 1);
    Tensor want(Shape{s.col_count()}, DType::F32), got(Shape{s.col_count()}, DType::F32);
    backend::im2col(x, g, want);
    for (int64_t i = 0; i < s.col_count(); ++i) got.data<float>()[i] = im2col_element(x.data<float>(), s, i);
    expect_bitwise(got, want, "im2col");
  }
}

TEST(EmulatedKernels, Col2imGatherMatchesCpuScatter) {
  for (const ConvCase& cc : CONV_CASES) {
    const backend::ConvGeometry g = geometry(cc);
    const ConvShape s = shape_of(cc);
    const Tensor cols = random(Shape{s.col_count()}, 2);
    // The CPU's col2im may overwrite the entries that stand for padding (ops_nn.h), so it gets a copy;
    // the gather never reads them.
    Tensor scratch_cols(Shape{s.col_count()}, DType::F32);
    backend::copy(cols, scratch_cols);
    Tensor want(Shape{cc.n, cc.c, cc.h, cc.w}, DType::F32), got(Shape{cc.n, cc.c, cc.h, cc.w}, DType::F32);
    backend::col2im(scratch_cols, g, want);
    for (int64_t i = 0; i < s.in_count(); ++i)
      got.data<float>()[i] = col2im_element(cols.data<float>(), s, i);
    expect_bitwise(got, want, "col2im");
  }
}

TEST(EmulatedKernels, SwapLeadingDims) {
  const int64_t a = 3, b = 4, inner = 5;
  const Tensor src = random(Shape{a * b * inner}, 3);
  Tensor want(Shape{a * b * inner}, DType::F32), got(Shape{a * b * inner}, DType::F32);
  backend::swap_leading_dims(src, want, a, b, inner);
  for (int64_t i = 0; i < a * b * inner; ++i)
    got.data<float>()[i] = src.data<float>()[swap_source_index(i, a, b, inner)];
  expect_bitwise(got, want, "swap");
}

struct PoolCase {
  int64_t planes, h, w, k, stride;
};
const PoolCase POOL_CASES[] = {{3, 6, 6, 2, 2}, {2, 7, 7, 3, 2}, {2, 5, 6, 2, 1}, {1, 9, 9, 3, 3}};

TEST(EmulatedKernels, PoolingMatchesCpu) {
  for (const PoolCase& pc : POOL_CASES) {
    const backend::PoolGeometry g{1, pc.h, pc.w, pc.k, pc.stride};
    const PoolShape s{pc.planes, pc.h, pc.w, pc.k, pc.stride, g.out_height(), g.out_width()};
    const int64_t out_n = pc.planes * s.out_pixels(), in_n = pc.planes * s.in_pixels();
    const Tensor x = random_ints(Shape{pc.planes, pc.h, pc.w}, 4);
    const Tensor dy = random(Shape{out_n}, 5);

    Tensor y(Shape{out_n}, DType::F32), arg(Shape{out_n}, DType::I32), y2(Shape{out_n}, DType::F32),
        arg2(Shape{out_n}, DType::I32);
    backend::max_pool_forward(x, g, y, arg);
    for (int64_t o = 0; o < out_n; ++o)
      max_pool_element(x.data<float>(), s, o, y2.data<float>()[o], arg2.data<int32_t>()[o]);
    expect_bitwise(y2, y, "max pool");
    ASSERT_EQ(std::memcmp(arg.raw(), arg2.raw(), arg.num_bytes()), 0) << "max pool argmax (ties: first wins)";

    Tensor dx(Shape{in_n}, DType::F32), dx2(Shape{in_n}, DType::F32);
    backend::max_pool_backward(dy, arg, g, dx);
    for (int64_t i = 0; i < in_n; ++i)
      dx2.data<float>()[i] = max_pool_backward_element(dy.data<float>(), arg.data<int32_t>(), s, i);
    expect_bitwise(dx2, dx, "max pool backward");

    backend::avg_pool_forward(x, g, y);
    for (int64_t o = 0; o < out_n; ++o) y2.data<float>()[o] = avg_pool_element(x.data<float>(), s, o);
    expect_bitwise(y2, y, "avg pool");
    backend::avg_pool_backward(dy, g, dx);
    for (int64_t i = 0; i < in_n; ++i)
      dx2.data<float>()[i] = avg_pool_backward_element(dy.data<float>(), s, i);
    expect_close(dx2, dx, 2e-7, "avg pool backward");  // acc += dy·(1/k²) may become one FMA
  }
}

TEST(EmulatedKernels, GlobalAveragePool) {
  const int64_t rows = 6, spatial = 49;
  const Tensor x = random(Shape{rows * spatial}, 6);
  Tensor y(Shape{rows}, DType::F32), y2(Shape{rows}, DType::F32);
  backend::spatial_mean_forward(x, spatial, y);
  for (int64_t r = 0; r < rows; ++r)
    y2.data<float>()[r] = spatial_mean_row(x.data<float>() + r * spatial, spatial);
  expect_bitwise(y2, y, "spatial mean");
}

TEST(EmulatedKernels, DropoutMaskIsTheCpuMask) {
  const int64_t n = 4096;
  const double p = 0.3;
  const uint64_t seed = 42, stream = 7, offset = 1000;
  const Tensor x = random(Shape{n}, 7);
  Tensor y(Shape{n}, DType::F32), y2(Shape{n}, DType::F32);
  backend::dropout_forward(x, p, seed, stream, offset, y);
  const float keep_scale = float(1.0 / (1.0 - p));
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    y2.data<float>()[i] =
        dropout_element(x.data<float>()[i], p, keep_scale, seed, stream, offset + uint64_t(i));
    dropped += y2.data<float>()[i] == 0.0f;
  }
  expect_bitwise(y2, y, "dropout");
  EXPECT_NEAR(double(dropped) / n, p, 0.03);  // it does drop about p of the elements
}

TEST(EmulatedKernels, BatchNormPieces) {
  const int64_t rows = 4, channels = 3, spatial = 10, m = rows * spatial;
  const Tensor x = random(Shape{rows, channels, spatial}, 8, -2, 3);
  const Tensor dy = random(Shape{rows, channels, spatial}, 9);
  const Tensor gamma = random(Shape{channels}, 10, 0.5, 1.5), beta = random(Shape{channels}, 11);
  Tensor stats(Shape{2 * channels + 1}, DType::F64), grad_sums(Shape{2 * channels}, DType::F64);
  Tensor mean(Shape{channels}, DType::F32), invstd(Shape{channels}, DType::F32);
  Tensor rm(Shape{channels}, DType::F32), rv(Shape{channels}, DType::F32);
  backend::fill(rv, 1.0);
  backend::batchnorm_stats(x, channels, spatial, stats);
  backend::batchnorm_finalize(stats, channels, 1e-5, 0.1, mean, invstd, rm, rv);

  // Finalisation from the same sums: the same double formulas, bit for bit.
  for (int64_t c = 0; c < channels; ++c) {
    float mu = 0, is = 0, r_mean = 0, r_var = 1;
    const double* st = stats.data<double>();
    bn_finalize_channel(st[c], st[channels + c], double(m), 1e-5, 0.1, true, mu, is, r_mean, r_var);
    EXPECT_EQ(mu, mean.data<float>()[c]);
    EXPECT_EQ(is, invstd.data<float>()[c]);
    EXPECT_EQ(r_mean, rm.data<float>()[c]);
    EXPECT_EQ(r_var, rv.data<float>()[c]);
  }

  Tensor y(x.shape(), DType::F32), y2(x.shape(), DType::F32);
  backend::batchnorm_normalize(x, mean, invstd, gamma, beta, channels, spatial, y);
  for (int64_t i = 0; i < x.count(); ++i) {
    const int64_t c = (i / spatial) % channels;
    y2.data<float>()[i] =
        bn_normalize_element(x.data<float>()[i], mean.data<float>()[c], invstd.data<float>()[c],
                             gamma.data<float>()[c], beta.data<float>()[c]);
  }
  expect_close(y2, y, 4e-7, "batchnorm normalize");

  Tensor dgamma(Shape{channels}, DType::F32), dbeta(Shape{channels}, DType::F32);
  backend::batchnorm_backward_reduce(x, dy, mean, invstd, channels, spatial, grad_sums, dgamma, dbeta);
  for (bool batch : {true, false}) {
    Tensor dx(x.shape(), DType::F32), dx2(x.shape(), DType::F32);
    backend::batchnorm_backward_dx(x, dy, mean, invstd, gamma, batch ? stats : Tensor(),
                                   batch ? grad_sums : Tensor(), channels, spatial, dx);
    for (int64_t i = 0; i < x.count(); ++i) {
      const int64_t c = (i / spatial) % channels;
      const double* gs = grad_sums.data<double>();
      const BnDxCoeffs k = bn_dx_coeffs(gamma.data<float>()[c], invstd.data<float>()[c], batch, double(m),
                                        gs[c], gs[channels + c]);
      dx2.data<float>()[i] = bn_dx_element(x.data<float>()[i], dy.data<float>()[i], mean.data<float>()[c],
                                           float(k.k1), float(k.k2), float(k.k3));
    }
    expect_close(dx2, dx, 4e-6,
                 batch ? "batchnorm dx (batch statistics)" : "batchnorm dx (running statistics)");
  }
}

// The loss kernels call softmax_xent_row with the 16-bit storage types: the
// result must be that of the float row holding the same (decoded) values.
TEST(EmulatedKernels, CrossEntropyRowOnSixteenBitStorage) {
  const int64_t k = 10;
  Rng rng(12);
  std::vector<float> z(k);
  std::vector<Bf16> zb(k);
  std::vector<Half> zh(k);
  for (int64_t j = 0; j < k; ++j) {
    zb[j] = Bf16(4 * rng.uniform() - 2);
    zh[j] =
        Half::from_bits(float_to_half_bits(float(zb[j])));  // the same value, exactly representable in both
    z[j] = float(zb[j]);
  }
  for (int32_t label : {0, 3, 9}) {
    std::vector<float> dz(k);
    std::vector<Bf16> dzb(k);
    std::vector<Half> dzh(k);
    const double want = softmax_xent_row<double>(z.data(), k, label, 0.1, 0.5, dz.data());
    EXPECT_EQ(softmax_xent_row<double>(zb.data(), k, label, 0.1, 0.5, dzb.data()), want);
    EXPECT_EQ(softmax_xent_row<double>(zh.data(), k, label, 0.1, 0.5, dzh.data()), want);
    EXPECT_EQ(label_rank(zb.data(), k, label), label_rank(z.data(), k, label));
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_NEAR(float(dzb[j]), dz[j], 4e-3 * std::abs(dz[j]) + 1e-6);  // one bf16 rounding of dz
      EXPECT_NEAR(float(dzh[j]), dz[j], 5e-4 * std::abs(dz[j]) + 1e-7);  // one fp16 rounding of dz
    }
  }
}

}  // namespace
}  // namespace hpc::kernels
