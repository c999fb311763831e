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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "backend/ops.h"
#include "core/rng.h"
#include "kernels/cast_math.h"
#include "kernels/conv_math.h"
#include "kernels/dropout_math.h"
#include "kernels/llama_math.h"
#include "kernels/loss_math.h"
#include "kernels/norm_math.h"
#include "kernels/pool_math.h"
#include "kernels/transformer_math.h"
#include "kernels/transformer_plan.h"

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

ConvShape shape_of(const ConvCase& cc) {
  return ConvShape::make(cc.n, cc.c, cc.h, cc.w, cc.k, cc.stride, cc.pad);
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
    const ConvShape s = shape_of(cc);
    const Tensor x = random(Shape{cc.n, cc.c, cc.h, cc.w}, 1);
    Tensor want(Shape{s.col_count()}, DType::F32), got(Shape{s.col_count()}, DType::F32);
    backend::im2col(x, s, want);
    for (int64_t i = 0; i < s.col_count(); ++i) got.data<float>()[i] = im2col_element(x.data<float>(), s, i);
    expect_bitwise(got, want, "im2col");
  }
}

TEST(EmulatedKernels, Col2imGatherMatchesCpuScatter) {
  for (const ConvCase& cc : CONV_CASES) {
    const ConvShape s = shape_of(cc);
    const Tensor cols = random(Shape{s.col_count()}, 2);
    // The CPU's col2im may overwrite the entries that stand for padding (backend/ops.def), so it gets a copy;
    // the gather never reads them.
    Tensor scratch_cols(Shape{s.col_count()}, DType::F32);
    backend::copy(cols, scratch_cols);
    Tensor want(Shape{cc.n, cc.c, cc.h, cc.w}, DType::F32), got(Shape{cc.n, cc.c, cc.h, cc.w}, DType::F32);
    backend::col2im(scratch_cols, s, want);
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
  int64_t planes, h, w, k, stride, pad;
};
// The last two pad (max pooling only): ResNet's stem maxpool(3, stride=2, pad=1) on even and odd sizes.
const PoolCase POOL_CASES[] = {{3, 6, 6, 2, 2, 0}, {2, 7, 7, 3, 2, 0},  {2, 5, 6, 2, 1, 0},
                               {1, 9, 9, 3, 3, 0}, {2, 8, 10, 3, 2, 1}, {2, 7, 9, 3, 2, 1}};

TEST(EmulatedKernels, PoolingMatchesCpu) {
  for (const PoolCase& pc : POOL_CASES) {
    const PoolShape s = PoolShape::make(pc.planes, pc.h, pc.w, pc.k, pc.stride, pc.pad);
    const int64_t out_n = pc.planes * s.out_pixels(), in_n = pc.planes * s.in_pixels();
    const Tensor x = random_ints(Shape{pc.planes, pc.h, pc.w}, 4);
    const Tensor dy = random(Shape{out_n}, 5);

    Tensor y(Shape{out_n}, DType::F32), arg(Shape{out_n}, DType::I32), y2(Shape{out_n}, DType::F32),
        arg2(Shape{out_n}, DType::I32);
    backend::max_pool_forward(x, s, y, arg);
    for (int64_t o = 0; o < out_n; ++o)
      max_pool_element(x.data<float>(), s, o, y2.data<float>()[o], arg2.data<int32_t>()[o]);
    expect_bitwise(y2, y, "max pool");
    ASSERT_EQ(std::memcmp(arg.raw(), arg2.raw(), arg.num_bytes()), 0) << "max pool argmax (ties: first wins)";

    Tensor dx(Shape{in_n}, DType::F32), dx2(Shape{in_n}, DType::F32);
    backend::max_pool_backward(dy, arg, s, dx);
    for (int64_t i = 0; i < in_n; ++i)
      dx2.data<float>()[i] = max_pool_backward_element(dy.data<float>(), arg.data<int32_t>(), s, i);
    expect_bitwise(dx2, dx, "max pool backward");

    if (pc.pad > 0) continue;  // average pooling does not pad
    backend::avg_pool_forward(x, s, y);
    for (int64_t o = 0; o < out_n; ++o) y2.data<float>()[o] = avg_pool_element(x.data<float>(), s, o);
    expect_bitwise(y2, y, "avg pool");
    backend::avg_pool_backward(dy, s, dx);
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
  backend::batchnorm_normalize(x, mean, invstd, gamma, beta, false, channels, spatial, y);
  for (int64_t i = 0; i < x.count(); ++i) {
    const int64_t c = (i / spatial) % channels;
    y2.data<float>()[i] =
        bn_normalize_element(x.data<float>()[i], mean.data<float>()[c], invstd.data<float>()[c],
                             gamma.data<float>()[c], beta.data<float>()[c]);
  }
  expect_close(y2, y, 4e-7, "batchnorm normalize");

  Tensor dgamma(Shape{channels}, DType::F32), dbeta(Shape{channels}, DType::F32);
  backend::batchnorm_backward_reduce(x, dy, mean, invstd, gamma, beta, false, channels, spatial, grad_sums,
                                     dgamma, dbeta);
  for (bool batch : {true, false}) {
    Tensor dx(x.shape(), DType::F32), dx2(x.shape(), DType::F32);
    backend::batchnorm_backward_dx(x, dy, mean, invstd, gamma, beta, false, batch ? stats : Tensor(),
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

// ---- transformer (kernels/transformer.cu, transformer_plan.h) -----------------------------
// Warp kernels are emulated lane by lane: every lane's partial result from
// the lane function, then the butterfly (xor) shuffle's order of combining.
namespace hpc::kernels {
namespace {

template <typename V, typename Op>
V butterfly(std::array<V, WARP> v, Op op) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) {
    std::array<V, WARP> next = v;
    for (int l = 0; l < WARP; ++l) next[l] = op(v[l], v[l ^ offset]);
    v = next;
  }
  return v[0];
}
template <typename V>
V lane_sum(const std::array<V, WARP>& v) {
  return butterfly(v, [](V a, V b) { return a + b; });
}

TEST(EmulatedTransformer, TokenIdChecks) {
  EXPECT_TRUE(token_id_valid(0, 7, exact_id_limit<float>()));
  EXPECT_TRUE(token_id_valid(6, 7, exact_id_limit<float>()));
  for (double bad : {-1.0, 7.0, 2.5, std::nan("")}) EXPECT_FALSE(token_id_valid(bad, 7, 1e9)) << bad;
  // bf16 carries ids below 256 exactly: 257 arrives as 256, so 256 and up are refused.
  EXPECT_EQ(double(Bf16(257.0f)), 256.0);
  EXPECT_TRUE(token_id_valid(double(Bf16(255.0f)), 50257, exact_id_limit<Bf16>()));
  EXPECT_FALSE(token_id_valid(double(Bf16(257.0f)), 50257, exact_id_limit<Bf16>()));
  EXPECT_TRUE(token_id_valid(double(Half(2047.0f)), 50257, exact_id_limit<Half>()));
  EXPECT_FALSE(token_id_valid(double(Half(2049.0f)), 50257, exact_id_limit<Half>()));
}

// Forward gather and the sort-based deterministic scatter, bitwise against the CPU op.
TEST(EmulatedTransformer, EmbeddingMatchesCpu) {
  const int64_t b_n = 3, t_len = 5, vocab = 7, width = 6, n = b_n * t_len;
  Tensor ids(Shape{b_n, t_len}, DType::F32);
  Rng rng(21);
  for (int64_t i = 0; i < n; ++i) ids.data<float>()[i] = float(rng.below(4));  // repeats: long runs
  const Tensor wte = random(Shape{vocab, width}, 22), wpe = random(Shape{t_len, width}, 23);
  const Tensor dy = random(Shape{b_n, t_len, width}, 24);
  Tensor y(Shape{b_n, t_len, width}, DType::F32), y2(y.shape(), DType::F32);
  backend::embedding_forward(ids, wte, wpe, y);

  std::vector<int32_t> keys(n), sorted_key(n), sorted_pos(n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = ids.data<float>()[i];
    keys[i] = token_id_valid(v, vocab, exact_id_limit<float>()) ? int32_t(v) : int32_t(vocab);
  }
  for (int64_t e = 0; e < n * width; ++e) {
    const int64_t r = e / width, j = e % width;
    y2.data<float>()[e] =
        embedding_element(wte.data<float>()[keys[r] * width + j], wpe.data<float>()[(r % t_len) * width + j]);
  }
  expect_bitwise(y2, y, "embedding forward");

  for (int64_t i = 0; i < n; ++i) {  // stable_rank_kernel
    int64_t rank = 0;
    for (int64_t k = 0; k < n; ++k) rank += sorts_before(keys[k], k, keys[i], i);
    sorted_key[rank] = keys[i];
    sorted_pos[rank] = int32_t(i);
  }
  const Tensor dwte = random(Shape{vocab, width}, 25), dwpe = random(Shape{t_len, width}, 26);
  Tensor dwte2(dwte.shape(), DType::F32), dwpe2(dwpe.shape(), DType::F32);
  backend::copy(dwte, dwte2);
  backend::copy(dwpe, dwpe2);
  backend::embedding_backward(ids, dy, dwte, dwpe);
  int64_t runs = 0;
  for (int64_t e = 0; e < n * width; ++e)
    runs += embedding_token_grad(sorted_key.data(), sorted_pos.data(), n, e / width, e % width, width, vocab,
                                 dy.data<float>(), dwte2.data<float>());
  for (int64_t e = 0; e < t_len * width; ++e)
    embedding_position_grad(dy.data<float>(), b_n, t_len, width, e, dwpe2.data<float>());
  EXPECT_EQ(runs, 4 * width);  // ids 0..3 all occur in 15 draws (seeded)
  expect_bitwise(dwte2, dwte, "embedding token gradient");
  expect_bitwise(dwpe2, dwpe, "embedding position gradient");
}

TEST(EmulatedTransformer, LayerNormMatchesCpu) {
  const int64_t rows = 70, width = 45;  // width: lanes with 1 and 2 columns; rows: several splits
  const Tensor x = random(Shape{rows, width}, 31, -2, 3), dy = random(Shape{rows, width}, 32);
  const Tensor gamma = random(Shape{width}, 33, 0.5, 1.5), beta = random(Shape{width}, 34);
  Tensor y(x.shape(), DType::F32), mean(Shape{rows}, DType::F32), rstd(Shape{rows}, DType::F32);
  backend::layernorm_forward(x, gamma, beta, 1e-5, y, mean, rstd);
  Tensor y2(x.shape(), DType::F32), mean2(Shape{rows}, DType::F32), rstd2(Shape{rows}, DType::F32);
  const float *g = gamma.data<float>(), *bt = beta.data<float>();
  for (int64_t r = 0; r < rows; ++r) {  // layernorm_forward_kernel
    const float* in = x.data<float>() + r * width;
    std::array<double, WARP> part{};
    for (int l = 0; l < WARP; ++l) part[l] = ln_lane_sum(in, width, l);
    const double mu = lane_sum(part) / double(width);
    for (int l = 0; l < WARP; ++l) part[l] = ln_lane_sq_dev(in, width, l, mu);
    const double rs = ln_rstd(lane_sum(part), width, 1e-5);
    for (int l = 0; l < WARP; ++l)
      ln_lane_normalize(in, g, bt, width, l, float(mu), float(rs), y2.data<float>() + r * width);
    mean2.data<float>()[r] = float(mu);
    rstd2.data<float>()[r] = float(rs);
  }
  expect_close(y2, y, 1e-6, "layernorm y");
  expect_close(mean2, mean, 1e-6, "layernorm mean");
  expect_close(rstd2, rstd, 1e-6, "layernorm rstd");

  Tensor dx = random(x.shape(), 35), dg = random(Shape{width}, 36), db = random(Shape{width}, 37);
  Tensor dx2(x.shape(), DType::F32), dg2(Shape{width}, DType::F32), db2(Shape{width}, DType::F32);
  backend::copy(dx, dx2);
  backend::copy(dg, dg2);
  backend::copy(db, db2);
  backend::layernorm_backward(x, dy, gamma, mean, rstd, dx, true, dg, db);
  for (int64_t r = 0; r < rows; ++r) {  // layernorm_dx_kernel
    const float *in = x.data<float>() + r * width, *d = dy.data<float>() + r * width;
    const float m = mean.data<float>()[r], rs = rstd.data<float>()[r];
    std::array<double, WARP> sg{}, sgx{};
    for (int l = 0; l < WARP; ++l) ln_lane_grad_sums(in, d, g, width, l, m, rs, sg[l], sgx[l]);
    const float mg = float(lane_sum(sg) / double(width)), mgx = float(lane_sum(sgx) / double(width));
    for (int l = 0; l < WARP; ++l)
      ln_lane_dx(in, d, g, width, l, m, rs, mg, mgx, true, dx2.data<float>() + r * width);
  }
  expect_close(dx2, dx, 2e-5, "layernorm dx (accumulated)");
  const int64_t splits = layernorm_param_splits(rows), per = (rows + splits - 1) / splits;
  ASSERT_GT(splits, 1);
  for (int64_t j = 0; j < width; ++j) {  // partials kernel, then the finish kernel in split order
    double s_xhat = dg2.data<float>()[j], s_dy = db2.data<float>()[j];
    for (int64_t s = 0; s < splits; ++s) {
      double a = 0, b = 0;
      const int64_t begin = s * per, end = std::min(begin + per, rows);
      if (begin < end)
        ln_param_partial(x.data<float>(), dy.data<float>(), mean.data<float>(), rstd.data<float>(), width, j,
                         begin, end, a, b);
      s_xhat += a;
      s_dy += b;
    }
    dg2.data<float>()[j] = float(s_xhat);
    db2.data<float>()[j] = float(s_dy);
  }
  expect_close(dg2, dg, 2e-5, "layernorm dgamma");
  expect_close(db2, db, 2e-5, "layernorm dbeta");
}

// Runs an attention plan on the CPU: GEMMs by cuBLAS's column-major
// definition, softmax steps through the lane functions.
struct HostAttnBuffers {
  std::map<AttnBuf, float*> buf;
  float* at(const AttnOperand& o, int64_t z) const { return buf.at(o.buf) + o.offset + z * o.batch_stride; }
};

void run_plan_on_cpu(const std::vector<AttnStep>& steps, const HostAttnBuffers& hb) {
  for (const AttnStep& step : steps) {
    if (step.kind == AttnStep::Kind::Copy) {  // cudaMemcpy2DAsync
      const RowCopy& c = step.row_copy;
      for (int64_t r = 0; r < c.rows; ++r)
        std::copy_n(hb.at(c.src, 0) + r * c.src.ld, c.cols, hb.at(c.dst, 0) + r * c.dst.ld);
      continue;
    }
    if (step.kind == AttnStep::Kind::Gemm) {
      const CublasGemm& g = step.matmul;
      for (int64_t z = 0; z < g.batch; ++z) {
        const float *a = hb.at(g.a, z), *b = hb.at(g.b, z);
        float* c = hb.at(g.c, z);
        for (int64_t i = 0; i < g.m; ++i)
          for (int64_t j = 0; j < g.n; ++j) {
            double acc = 0;
            for (int64_t l = 0; l < g.k; ++l) {
              const float av = g.trans_a ? a[l + i * g.a.ld] : a[i + l * g.a.ld];
              const float bv = g.trans_b ? b[j + l * g.b.ld] : b[l + j * g.b.ld];
              acc += double(av) * double(bv);
            }
            float& out = c[i + j * g.c.ld];
            out = float(g.alpha * acc + (g.beta == 0 ? 0.0 : g.beta * double(out)));
          }
      }
      continue;
    }
    const SoftmaxRows& r = step.rows;
    ASSERT_EQ(r.p.ld, r.t_len);
    for (int64_t row = 0; row < r.batch * r.row_count(); ++row) {
      const int64_t z = row / r.row_count(), t = row % r.row_count();
      float* p = hb.at(r.p, z) + t * r.t_len;
      std::array<float, WARP> part{};
      if (step.kind == AttnStep::Kind::SoftmaxForward) {  // causal_softmax_forward_kernel
        const int64_t last = t + r.offset;
        for (int l = 0; l < WARP; ++l) part[l] = softmax_lane_max(p, last, l);
        const float mx = butterfly(part, [](float v, float w) { return w > v ? w : v; });
        for (int l = 0; l < WARP; ++l) part[l] = softmax_lane_exp_sum(p, last, l, mx);
        const float inv = 1.0f / lane_sum(part);
        for (int l = 0; l < WARP; ++l) softmax_lane_write(p, last, r.t_len, l, mx, inv);
      } else {
        float* dp = hb.at(r.dp, z) + t * r.t_len;
        for (int l = 0; l < WARP; ++l) part[l] = softmax_lane_dot(p, dp, t, l);
        const float dot = lane_sum(part);
        for (int l = 0; l < WARP; ++l) softmax_lane_backward(p, dp, t, r.t_len, l, dot);
      }
    }
  }
}

// Both loop orders (over samples, batched over heads, and the reverse), a
// context longer than a warp so lanes wrap around the row, and grouped kv
// heads (multi-query, groups of two: the key/value gradients summed by beta 1).
TEST(EmulatedTransformer, AttentionPlanMatchesCpu) {
  struct Case {
    int64_t samples, heads, t_len, width, kv_heads;
  };
  for (const Case cs : {Case{2, 3, 5, 12, 3}, Case{3, 2, 37, 8, 2}, Case{1, 1, 4, 4, 1}, Case{2, 4, 6, 16, 2},
                        Case{3, 4, 5, 8, 1}}) {
    SCOPED_TRACE(testing::Message() << cs.samples << " samples, " << cs.heads << " heads, " << cs.kv_heads
                                    << " kv heads, T " << cs.t_len);
    const int64_t b_n = cs.samples, h_n = cs.heads, t = cs.t_len, c = cs.width, kv = cs.kv_heads;
    AttnShape shape{b_n, h_n, t, c};
    shape.kv_heads = kv;
    const int64_t head_dim = c / h_n;  // c is a multiple of the heads
    const double scale = 1.0 / std::sqrt(double(head_dim));
    const Tensor qkv = random(Shape{b_n, t, shape.row()}, 41, -2, 2), dout = random(Shape{b_n, t, c}, 42);
    Tensor probs(Shape{b_n, h_n, t, t}, DType::F32), out(Shape{b_n, t, c}, DType::F32);
    Tensor dqkv(qkv.shape(), DType::F32), scratch(Shape{t, t}, DType::F32);
    backend::attention_forward(qkv, h_n, kv, probs, out);
    backend::attention_backward(qkv, probs, dout, h_n, kv, dqkv, scratch);

    Tensor probs2(probs.shape(), DType::F32), out2(out.shape(), DType::F32), dqkv2(dqkv.shape(), DType::F32);
    Tensor scratch2(Shape{attention_scratch_count(shape)}, DType::F32);
    backend::fill(probs2, 7.0);  // the plan must overwrite every element, the masked ones too
    backend::fill(dqkv2, 7.0);
    HostAttnBuffers hb;
    hb.buf = {{AttnBuf::Qkv, qkv.data<float>()},    {AttnBuf::Probs, probs2.data<float>()},
              {AttnBuf::Out, out2.data<float>()},   {AttnBuf::Dout, dout.data<float>()},
              {AttnBuf::Dqkv, dqkv2.data<float>()}, {AttnBuf::Scratch, scratch2.data<float>()}};
    run_plan_on_cpu(attention_forward_plan(shape, scale), hb);
    expect_close(probs2, probs, 2e-5, "attention probabilities");
    expect_close(out2, out, 2e-5, "attention output");
    run_plan_on_cpu(attention_backward_plan(shape, scale), hb);
    expect_close(dqkv2, dqkv, 5e-5, "attention dqkv");
  }
}

// Decoding one sequence against the key/value cache (attention_decode_plan)
// gives the CPU op's outputs and caches: a 3-position prompt, then one
// position, with grouped kv heads.
TEST(EmulatedTransformer, AttentionDecodePlanMatchesCpu) {
  const int64_t heads = 4, kv = 2, d = 8, w = (heads + 2 * kv) * d, rows = 10;
  const double scale = 1.0 / std::sqrt(double(d));
  Tensor kc(Shape{rows, kv * d}, DType::F32), vc(kc.shape(), DType::F32);
  Tensor kc2(kc.shape(), DType::F32), vc2(kc.shape(), DType::F32);
  int64_t pos = 0;
  for (const int64_t n : {int64_t(3), int64_t(1), int64_t(2)}) {
    SCOPED_TRACE(testing::Message() << n << " positions after " << pos);
    const Tensor qkv = random(Shape{1, n, w}, 51 + uint64_t(pos), -2, 2);
    Tensor out(Shape{1, n, heads * d}, DType::F32), out2(out.shape(), DType::F32);
    backend::attention_decode(qkv, heads, kv, kc, vc, pos, out);
    Tensor scores(Shape{attention_decode_scratch_count(n, pos)}, DType::F32);
    HostAttnBuffers hb;
    hb.buf = {{AttnBuf::Qkv, qkv.data<float>()},
              {AttnBuf::Out, out2.data<float>()},
              {AttnBuf::KCache, kc2.data<float>()},
              {AttnBuf::VCache, vc2.data<float>()},
              {AttnBuf::Scratch, scores.data<float>()}};
    run_plan_on_cpu(attention_decode_plan(heads, kv, d, n, pos, scale), hb);
    expect_bitwise(kc2, kc, "key cache");
    expect_bitwise(vc2, vc, "value cache");
    expect_close(out2, out, 2e-5, "decoded attention");
    pos += n;
  }
}

// ---- llama pieces (kernels/llama.cu, llama_math.h) ---------------------------------------

TEST(EmulatedLlama, RmsNormMatchesCpu) {
  const int64_t rows = 5, width = 70;  // a width past two warps of lanes
  const Tensor x = random(Shape{rows, width}, 61, -2, 2), w = random(Shape{width}, 62),
               dy = random(Shape{rows, width}, 63);
  Tensor y(x.shape(), DType::F32), rstd(Shape{rows}, DType::F32), y2(x.shape(), DType::F32),
      rstd2(Shape{rows}, DType::F32);
  backend::rmsnorm_forward(x, w, 1e-5, y, rstd);
  for (int64_t r = 0; r < rows; ++r) {  // rmsnorm_forward_kernel
    const float* in = x.data<float>() + r * width;
    std::array<double, WARP> part{};
    for (int l = 0; l < WARP; ++l) part[l] = rms_lane_sum_sq(in, width, l);
    const double rs = rms_rstd(lane_sum(part), width, 1e-5);
    for (int l = 0; l < WARP; ++l)
      rms_lane_normalize(in, w.data<float>(), width, l, float(rs), y2.data<float>() + r * width);
    rstd2.data<float>()[r] = float(rs);
  }
  expect_close(y2, y, 1e-6, "rmsnorm y");
  expect_close(rstd2, rstd, 1e-6, "rmsnorm rstd");
  Tensor dx = random(x.shape(), 64), dw = random(Shape{width}, 65), dx2(x.shape(), DType::F32),
         dw2(Shape{width}, DType::F32);
  backend::copy(dx, dx2);
  backend::copy(dw, dw2);
  backend::rmsnorm_backward(x, dy, w, rstd, dx, true, dw);
  for (int64_t r = 0; r < rows; ++r) {  // rmsnorm_dx_kernel
    const float* in = x.data<float>() + r * width;
    const float* d = dy.data<float>() + r * width;
    std::array<double, WARP> part{};
    for (int l = 0; l < WARP; ++l)
      part[l] = rms_lane_grad_sum(in, d, w.data<float>(), width, l, rstd.data<float>()[r]);
    const float mean_gx = float(lane_sum(part) / double(width));
    for (int l = 0; l < WARP; ++l)
      rms_lane_dx(in, d, w.data<float>(), width, l, rstd.data<float>()[r], mean_gx, true,
                  dx2.data<float>() + r * width);
  }
  expect_close(dx2, dx, 2e-5, "rmsnorm dx (accumulated)");
  const int64_t splits = layernorm_param_splits(rows), per = (rows + splits - 1) / splits;
  for (int64_t j = 0; j < width; ++j) {  // partials, then the finish kernel's sum in split order
    double s = dw2.data<float>()[j];
    for (int64_t k = 0; k < splits; ++k) {
      const int64_t b = k * per, e = std::min(rows, b + per);
      if (b < e)
        s += rms_param_partial(x.data<float>(), dy.data<float>(), rstd.data<float>(), width, j, b, e);
    }
    dw2.data<float>()[j] = float(s);
  }
  // The CPU adds each row's term into dweight in float, the GPU sums its partials in double: an
  // absolute float rounding per row of terms up to ~2 (cancelling elements can be near 0).
  for (int64_t j = 0; j < width; ++j)
    ASSERT_NEAR(dw2.data<float>()[j], dw.data<float>()[j], 1e-6 + 2e-5 * std::abs(dw.data<float>()[j]))
        << "rmsnorm dweight " << j;
}

// The rotary kernel's index math (q heads, then k heads; v untouched), forward
// and inverse, bitwise the CPU op's (the same per-pair function).
TEST(EmulatedLlama, RotaryMatchesCpu) {
  const int64_t b_n = 2, t = 5, heads = 4, kv = 2, d = 6, w = (heads + 2 * kv) * d;
  const Tensor qkv = random(Shape{b_n, t, w}, 71, -2, 2), cos = random(Shape{t, d / 2}, 72),
               sin = random(Shape{t, d / 2}, 73);
  for (bool interleaved : {false, true})
    for (bool inverse : {false, true}) {
      Tensor a(qkv.shape(), DType::F32), b(qkv.shape(), DType::F32);
      backend::copy(qkv, a);
      backend::copy(qkv, b);
      backend::rotary_apply(a, heads, kv, cos, sin, interleaved, inverse);
      for (int64_t e = 0; e < b_n * t * (heads + kv) * (d / 2); ++e)
        rotary_element(b.data<float>(), e, heads, kv, d, t, cos.data<float>(), sin.data<float>(), interleaved,
                       inverse);
      expect_bitwise(b, a, "rotary");
    }
}

// SwiGLU's element functions against the CPU op in float64 (the same
// function) and float32 (exp8 against std::exp: a few ulps).
TEST(EmulatedLlama, SwiGluMatchesCpu) {
  const int64_t rows = 3, f = 37;
  const Tensor gu = random(Shape{rows, 2 * f}, 81, -6, 6), dout = random(Shape{rows, f}, 82);
  Tensor out(Shape{rows, f}, DType::F32), out2(out.shape(), DType::F32);
  Tensor dgu(gu.shape(), DType::F32), dgu2(gu.shape(), DType::F32);
  backend::swiglu_forward(gu, out);
  backend::swiglu_backward(gu, dout, dgu);
  for (int64_t e = 0; e < rows * f; ++e) {
    swiglu_forward_element(gu.data<float>(), out2.data<float>(), e, f);
    swiglu_backward_element(gu.data<float>(), dout.data<float>(), dgu2.data<float>(), e, f);
  }
  expect_close(out2, out, 1e-6, "swiglu");
  expect_close(dgu2, dgu, 1e-6, "swiglu backward");
}

}  // namespace
}  // namespace hpc::kernels
