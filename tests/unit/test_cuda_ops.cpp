// Every CUDA backend op against the CPU reference, in float64, float32,
// bfloat16 and float16 (tolerances in device_compare.h). Without a GPU this
// binary prints "SKIPPED: no GPU" and exits 77; --self-check-on-cpu runs the
// harness with the CPU standing in for the GPU.
#include <iterator>
#include <limits>
#include <stdexcept>

#include "backend/ops.h"
#include "core/error.h"
#include "device_compare.h"
#include "nn/layers/conv_lowering.h"

namespace hpc::test {
namespace {

using namespace backend;
using kernels::ActivationKind;
using kernels::ConvShape;
using kernels::PoolShape;

// ---- core ------------------------------------------------------------------------

// C = 0.7·op(A)·op(B) + C (beta = 1: accumulation, as layers use it) on the DUT and on the CPU
// in float64 from the same rounded inputs, for every transpose; seed picks the values.
void check_gemm(DType d, int64_t m, int64_t n, int64_t k, uint64_t seed, Tol tol) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + (ta ? " Aᵀ" : " A") + (tb ? " Bᵀ" : " B"));
      const Tensor a = random64(ta ? Shape{k, m} : Shape{m, k}, seed),
                   b = random64(tb ? Shape{n, k} : Shape{k, n}, seed + 1);
      const Tensor c = random64(Shape{m, n}, seed + 2);
      const Tensor da = on_dut(a, d), db = on_dut(b, d), dc = on_dut(c, d);
      Tensor ra = rounded64(a, d), rb = rounded64(b, d), rc = rounded64(c, d);
      gemm(ta, tb, m, n, k, 0.7, da, db, 1.0, dc);
      gemm(ta, tb, m, n, k, 0.7, ra, rb, 1.0, rc);
      expect_close(dc, rc, tol, "gemm");
    }
}

TEST(CudaOps, Gemm) {
  for (DType d : float_dtypes()) check_gemm(d, 37, 29, 53, 1, tol_for(d));
}

// Large 16-bit GEMMs with sizes that are not multiples of 8 run on zero-padded copies of
// their operands (every size odd here); the result must not change.
TEST(CudaOps, GemmUnalignedLarge) {
  if (self_check()) GTEST_SKIP() << "16-bit GEMMs need a GPU";
  // m·n·k just above the padding threshold (2^30). Sums of ~1000 products: the 16-bit rounding
  // of the result, relative to its size, and an absolute allowance for results near 0.
  for (DType d : {DType::BF16, DType::F16}) check_gemm(d, 1021, 1031, 1029, 11, {0.05, tol_for(d).rtol});
}

TEST(CudaOps, FillCopyConvertAxpyScale) {
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const Shape s{1000};
    const Tensor x = random64(s, 4), y = random64(s, 5);
    Tensor dx = on_dut(x, d), dy = on_dut(y, d);
    Tensor rx = rounded64(x, d), ry = rounded64(y, d);

    axpy(-0.3, dx, dy);
    axpy(-0.3, rx, ry);
    expect_close(dy, ry, tol_for(d), "axpy");
    scale(dy, 1.7);
    scale(ry, 1.7);
    expect_close(dy, ry, tol_for(d), "scale");

    Tensor dz(s, d, dut());
    fill(dz, 0.3);
    Tensor rz(s, DType::F64);
    fill(rz, 0.3);
    expect_close(dz, rounded64(rz, d), EXACT, "fill");

    Tensor dcopy(s, d, dut());
    copy(dx, dcopy);  // device → device
    expect_close(dcopy, rx, EXACT, "copy");
    Tensor hcopy(s, d), back(s, d, dut());
    copy(dx, hcopy);    // device → host
    copy(hcopy, back);  // host → device
    expect_close(back, rx, EXACT, "copy host round trip");
  }
}

TEST(CudaOps, ConvertEveryPair) {
  const Shape s{300};
  const Tensor v = random64(s, 6, -100, 100);
  for (DType from : float_dtypes())
    for (DType to : float_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " → " + dtype_name(to));
      const Tensor src = on_dut(v, from);
      Tensor dst(s, to, dut());
      convert(src, dst);
      expect_close(dst, rounded64(host64(src), to), EXACT, "convert");
    }
  // Integer sources: the loader's uint8 images and int32 labels.
  Tensor bytes(s, DType::U8), ints(s, DType::I32);
  for (int64_t i = 0; i < s.count(); ++i) {
    bytes.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7 % 256);
    ints.data<int32_t>()[i] = static_cast<int32_t>(i * 7919 % 100000 - 50000);
  }
  for (const Tensor& src : {bytes, ints})
    for (DType to : float_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(src.dtype())) + " → " + dtype_name(to));
      Tensor dst(s, to, dut());
      convert(raw_on_dut(src), dst);
      Tensor ref(s, DType::F64);
      convert(src, ref);
      expect_close(dst, rounded64(ref, to), EXACT, "convert from integers");
    }
}

TEST(CudaOps, CopyAsyncFromPinnedMemory) {
  const Shape s{4096};
  const Tensor v = random64(s, 7);
  Tensor pinned = Tensor::pinned(s, DType::F32);
  convert(v, pinned);
  Tensor dst(s, DType::F32, dut());
  copy_async(pinned, dst);
  expect_close(dst, rounded64(v, DType::F32), EXACT, "copy_async");
}

TEST(CudaOps, Reductions) {
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    for (int64_t n : {1, 255, 100003}) {
      const Tensor x = random64(Shape{n}, 8);
      const Tensor dx = on_dut(x, d), rx = rounded64(x, d);
      // The inputs are exact in double: only the summation order differs.
      EXPECT_NEAR(sum(dx), sum(rx), 1e-12 * n);
      EXPECT_NEAR(sum_squares(dx), sum_squares(rx), 1e-12 * n);
    }
  }
}

TEST(CudaOps, BiasAddAndGradient) {
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    for (int64_t spatial : {1, 49}) {
      const int64_t rows = 6, channels = 5;
      const Tensor y = random64(Shape{rows, channels, spatial}, 9), b = random64(Shape{channels}, 10);
      Tensor dyv = on_dut(y, d), ry = rounded64(y, d);
      const Tensor db = on_dut(b, d), rb = rounded64(b, d);
      add_bias(dyv, db, channels, spatial);
      add_bias(ry, rb, channels, spatial);
      expect_close(dyv, ry, tol_for(d), "add_bias");
      Tensor dg = on_dut(b, d), rg = rounded64(b, d);  // bias_grad adds into what is there
      bias_grad(dyv, dg, channels, spatial);
      bias_grad(host64(dyv), rg, channels, spatial);
      expect_close(dg, rg, tol_for(d), "bias_grad");
    }
  }
}

// ---- activations, dropout ------------------------------------------------------------

TEST(CudaOps, Activations) {
  for (DType d : float_dtypes())
    for (ActivationKind act : {ActivationKind::Relu, ActivationKind::Gelu, ActivationKind::Tanh}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " activation " + std::to_string(int(act)));
      const Shape s{2000};
      const Tensor x = random64(s, 11, -4, 4), g = random64(s, 12);
      const Tensor dx = on_dut(x, d), dg = on_dut(g, d);
      const Tensor rx = rounded64(x, d), rg = rounded64(g, d);
      Tensor dy(s, d, dut()), ry(s, DType::F64);
      activation_forward(act, dx, dy);
      activation_forward(act, rx, ry);
      expect_close(dy, ry, tol_for(d), "forward");
      Tensor dgrad(s, d, dut()), rgrad(s, DType::F64);
      activation_backward(act, dx, dy, dg, dgrad);
      activation_backward(act, rx, host64(dy), rg, rgrad);  // tanh differentiates at the DUT's own y
      expect_close(dgrad, rgrad, tol_for(d), "backward");
    }
}

TEST(CudaOps, ElementwiseAdd) {
  for (DType d : float_dtypes()) {
    const Tensor a = random64(Shape{777}, 13), b = random64(Shape{777}, 14);
    Tensor out(Shape{777}, d, dut()), ref(Shape{777}, DType::F64);
    elementwise_add(on_dut(a, d), on_dut(b, d), out);
    elementwise_add(rounded64(a, d), rounded64(b, d), ref);
    expect_close(out, ref, tol_for(d), std::string("add ") + dtype_name(d));
  }
}

TEST(CudaOps, DropoutMaskIsTheCpuMask) {
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const Shape s{5000};
    const Tensor x = random64(s, 15, 0.5, 1.5);  // never 0, so a 0 in y means "dropped"
    Tensor dy(s, d, dut());
    dropout_forward(on_dut(x, d), 0.25, 99, 3, 12345, dy);
    const bool same_dtype = d == DType::F32 || d == DType::F64;
    Tensor ref(s, same_dtype ? d : DType::F64);
    dropout_forward(same_dtype ? host_as(rounded64(x, d), d) : rounded64(x, d), 0.25, 99, 3, 12345, ref);
    expect_close(dy, host64(ref), same_dtype ? EXACT : tol_for(d), "dropout");
    Tensor dback(s, d, dut());
    dropout_backward(dy, 0.25, 99, 3, 12345, dback);  // the same mask again, scaled once more
    const Tensor h = host64(dback), fwd = host64(dy);
    for (int64_t i = 0; i < s.count(); ++i)
      ASSERT_EQ(h.data<double>()[i] == 0, fwd.data<double>()[i] == 0) << i;
  }
}

// ---- convolution lowering and pooling ------------------------------------------------------

TEST(CudaOps, Im2colCol2imSwap) {
  const ConvShape cases[] = {ConvShape::make(1, 3, 8, 8, 3, 1, 1), ConvShape::make(1, 2, 7, 5, 3, 2, 1),
                             ConvShape::make(1, 4, 6, 6, 1, 2, 0), ConvShape::make(1, 2, 9, 9, 5, 1, 0)};
  for (DType d : float_dtypes())
    for (const ConvShape& g : cases) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " k" + std::to_string(g.kernel) + " s" +
                   std::to_string(g.stride));
      const bool same = d == DType::F32 || d == DType::F64;  // the CPU reference in the DUT's own dtype
      const DType ref_dtype = same ? d : DType::F64;
      const int64_t n = 3, cols_n = g.col_rows() * n * g.out_pixels();
      const Tensor x = random64(Shape{n, g.channels, g.height, g.width}, 16);
      Tensor cols(Shape{cols_n}, d, dut()), ref_cols(Shape{cols_n}, ref_dtype);
      im2col(on_dut(x, d), g, cols);
      im2col(host_as(rounded64(x, d), ref_dtype), g, ref_cols);
      expect_close(cols, host64(ref_cols), EXACT, "im2col");

      const Tensor c = random64(Shape{cols_n}, 17);
      Tensor dx(x.shape(), d, dut()), ref_dx(x.shape(), ref_dtype);
      Tensor ref_c = host_as(rounded64(c, d), ref_dtype);
      col2im(on_dut(c, d), g, dx);
      col2im(ref_c, g, ref_dx);
      expect_close(dx, host64(ref_dx), same ? EXACT : tol_for(d), "col2im");

      const int64_t a = 4, b = n, inner = g.out_pixels();
      const Tensor src = random64(Shape{a * b * inner}, 18);
      Tensor dst(Shape{a * b * inner}, d, dut()), ref_dst(Shape{a * b * inner}, DType::F64);
      swap_leading_dims(on_dut(src, d), dst, a, b, inner);
      swap_leading_dims(rounded64(src, d), ref_dst, a, b, inner);
      expect_close(dst, ref_dst, EXACT, "swap_leading_dims");
    }
}

TEST(CudaOps, Pooling) {
  const PoolShape cases[] = {PoolShape::make(4, 8, 8, 2, 2), PoolShape::make(3, 7, 7, 3, 2),
                             PoolShape::make(2, 5, 6, 2, 1)};
  for (DType d : float_dtypes())
    for (const PoolShape& g : cases) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " k" + std::to_string(g.kernel) + " s" +
                   std::to_string(g.stride));
      const bool same = d == DType::F32 || d == DType::F64;
      const DType ref_dtype = same ? d : DType::F64;
      const int64_t n = 2, out_n = n * g.planes * g.out_h * g.out_w;
      Tensor x = random64(Shape{n, g.planes, g.height, g.width}, 19);
      for (int64_t i = 0; i < x.count(); ++i)
        x.data<double>()[i] = std::floor(4 * x.data<double>()[i]);  // ties
      const Tensor dyv = random64(Shape{out_n}, 20);
      const Tensor rx = host_as(rounded64(x, d), ref_dtype), rdy = host_as(rounded64(dyv, d), ref_dtype);

      Tensor y(Shape{out_n}, d, dut()), arg(Shape{out_n}, DType::I32, dut());
      Tensor ry(Shape{out_n}, ref_dtype), rarg(Shape{out_n}, DType::I32);
      max_pool_forward(on_dut(x, d), g, y, arg);
      max_pool_forward(rx, g, ry, rarg);
      expect_close(y, host64(ry), EXACT, "max pool");
      EXPECT_EQ(std::memcmp(host_raw(arg).raw(), rarg.raw(), rarg.num_bytes()), 0)
          << "argmax (first maximum wins)";
      Tensor dx(x.shape(), d, dut()), rdx(x.shape(), ref_dtype);
      max_pool_backward(on_dut(dyv, d), arg, g, dx);
      max_pool_backward(rdy, rarg, g, rdx);
      expect_close(dx, host64(rdx), same ? EXACT : tol_for(d), "max pool backward");

      avg_pool_forward(on_dut(x, d), g, y);
      avg_pool_forward(rx, g, ry);
      expect_close(y, host64(ry), same ? EXACT : tol_for(d), "avg pool");
      avg_pool_backward(on_dut(dyv, d), g, dx);
      avg_pool_backward(rdy, g, rdx);
      expect_close(dx, host64(rdx), tol_for(d), "avg pool backward");
    }
  for (DType d : float_dtypes()) {
    const int64_t rows = 12, spatial = 64;
    const Tensor x = random64(Shape{rows * spatial}, 21), g = random64(Shape{rows}, 22);
    Tensor y(Shape{rows}, d, dut()), ry(Shape{rows}, DType::F64);
    spatial_mean_forward(on_dut(x, d), spatial, y);
    spatial_mean_forward(rounded64(x, d), spatial, ry);
    expect_close(y, ry, tol_for(d), std::string("global average pool ") + dtype_name(d));
    Tensor dx(Shape{rows * spatial}, d, dut()), rdx(Shape{rows * spatial}, DType::F64);
    spatial_mean_backward(on_dut(g, d), spatial, dx);
    spatial_mean_backward(rounded64(g, d), spatial, rdx);
    expect_close(dx, rdx, tol_for(d), std::string("global average pool backward ") + dtype_name(d));
  }
}

// ---- batch normalisation ---------------------------------------------------------------

TEST(CudaOps, BatchNormPieces) {
  for (DType d : float_dtypes())
    for (bool training : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + (training ? " training" : " evaluation"));
      const int64_t rows = 8, channels = 6, spatial = 49;
      const DType sd = d == DType::F64 ? DType::F64 : DType::F32;  // statistics dtype (BatchNorm::build)
      const Tensor x = random64(Shape{rows, channels, spatial}, 23, -1, 3), dyv = random64(x.shape(), 24);
      const Tensor gamma = random64(Shape{channels}, 25, 0.5, 1.5), beta = random64(Shape{channels}, 26);
      const Tensor rm0 = random64(Shape{channels}, 27), rv0 = random64(Shape{channels}, 28, 0.5, 2);
      const Tensor rx = rounded64(x, d), rdy = rounded64(dyv, d), rgamma = rounded64(gamma, d),
                   rbeta = rounded64(beta, d);

      Tensor stats(Shape{2 * channels + 1}, DType::F64, dut()), rstats(Shape{2 * channels + 1}, DType::F64);
      Tensor mean(Shape{channels}, sd, dut()), invstd(Shape{channels}, sd, dut());
      Tensor rmean(Shape{channels}, DType::F64), rinvstd(Shape{channels}, DType::F64);
      Tensor rm = on_dut(rm0, sd), rv = on_dut(rv0, sd), ref_rm = rounded64(rm0, sd),
             ref_rv = rounded64(rv0, sd);
      if (training) {
        batchnorm_stats(on_dut(x, d), channels, spatial, stats);
        batchnorm_stats(rx, channels, spatial, rstats);
        expect_close(stats, rstats, {1e-12, 1e-12}, "stats (double sums of the same values)");
        batchnorm_finalize(stats, channels, 1e-5, 0.1, mean, invstd, rm, rv);
        batchnorm_finalize(rstats, channels, 1e-5, 0.1, rmean, rinvstd, ref_rm, ref_rv);
        expect_close(rm, ref_rm, tol_for(sd), "running mean");
        expect_close(rv, ref_rv, tol_for(sd), "running var");
      } else {
        batchnorm_running_inverse(rm, rv, 1e-5, mean, invstd);
        batchnorm_running_inverse(ref_rm, ref_rv, 1e-5, rmean, rinvstd);
      }
      expect_close(mean, rmean, tol_for(sd), "mean");
      expect_close(invstd, rinvstd, tol_for(sd), "invstd");

      Tensor y(x.shape(), d, dut()), ry(x.shape(), DType::F64);
      batchnorm_normalize(on_dut(x, d), mean, invstd, on_dut(gamma, d), on_dut(beta, d), false, channels,
                          spatial, y);
      batchnorm_normalize(rx, host64(mean), host64(invstd), rgamma, rbeta, false, channels, spatial, ry);
      expect_close(y, ry, tol_for(d), "normalize");

      Tensor sums(Shape{2 * channels}, DType::F64, dut()), rsums(Shape{2 * channels}, DType::F64);
      Tensor dgamma = on_dut(gamma, d), dbeta = on_dut(beta, d);  // backward adds into them
      Tensor rdgamma = rounded64(gamma, d), rdbeta = rounded64(beta, d);
      batchnorm_backward_reduce(on_dut(x, d), on_dut(dyv, d), mean, invstd, Tensor(), Tensor(), false,
                                channels, spatial, sums, dgamma, dbeta);
      batchnorm_backward_reduce(rx, rdy, host64(mean), host64(invstd), Tensor(), Tensor(), false, channels,
                                spatial, rsums, rdgamma, rdbeta);
      expect_close(sums, rsums, {1e-9, 1e-9}, "grad sums");
      expect_close(dgamma, rdgamma, tol_for(d), "dgamma");
      expect_close(dbeta, rdbeta, tol_for(d), "dbeta");

      Tensor dx(x.shape(), d, dut()), rdx(x.shape(), DType::F64);
      batchnorm_backward_dx(on_dut(x, d), on_dut(dyv, d), mean, invstd, on_dut(gamma, d), Tensor(), false,
                            training ? stats : Tensor(), training ? sums : Tensor(), channels, spatial, dx);
      batchnorm_backward_dx(rx, rdy, host64(mean), host64(invstd), rgamma, Tensor(), false,
                            training ? host64(stats) : Tensor(), training ? host64(sums) : Tensor(), channels,
                            spatial, rdx);
      expect_close(dx, rdx, tol_for(d), "dx");
    }
}

// ---- losses ----------------------------------------------------------------------------------

TEST(CudaOps, SoftmaxCrossEntropy) {
  // A handful of classes (one warp per row) and a vocabulary-sized row (a block per row, k not
  // a multiple of the block; 16-bit rounding makes ties, which the rank rule must order).
  struct Case {
    int64_t n, k, valid;
  };
  for (const Case c : {Case{37, 10, 33}, Case{6, 3001, 5}}) {
    SCOPED_TRACE("k = " + std::to_string(c.k));
    Tensor labels(Shape{c.n}, DType::I32);
    for (int64_t i = 0; i < c.n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % c.k);
    for (DType d : float_dtypes()) {
      SCOPED_TRACE(dtype_name(d));
      const Tensor z = random64(Shape{c.n, c.k}, 29, -3, 3);
      Tensor dz(Shape{c.n, c.k}, d, dut()), rdz(Shape{c.n, c.k}, DType::F64);
      fill(dz, 5.0);  // padding rows must come back 0
      const ClassifyStats got =
          softmax_cross_entropy(on_dut(z, d), raw_on_dut(labels), c.valid, 0.1, 1.0 / c.valid, true, dz);
      const ClassifyStats want =
          softmax_cross_entropy(rounded64(z, d), labels, c.valid, 0.1, 1.0 / c.valid, true, rdz);
      // The GPU does the row's math in double on the same values; the CPU's float32 rows (the
      // self-check) take their exps in float (cpu/loss_ops.cpp).
      const bool float_exps = dut() == Device::CPU && d == DType::F32;
      EXPECT_NEAR(got.loss_sum, want.loss_sum, float_exps ? 1e-7 * want.loss_sum : 1e-12 * c.valid);
      EXPECT_EQ(got.correct1, want.correct1);
      EXPECT_EQ(got.correct5, want.correct5);
      expect_close(dz, rdz, tol_for(d), "dlogits");
      const ClassifyStats eval =
          softmax_cross_entropy(on_dut(z, d), raw_on_dut(labels), c.n, 0.0, 1.0, false, Tensor());
      EXPECT_EQ(eval.correct5, 0);  // not counted when not asked for
    }
  }
  const int64_t n = 37, k = 10, valid = 33;
  Tensor labels(Shape{n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % k);
  Tensor& bad = labels;  // labels' last use: sample 5 gets an out-of-range label
  bad.data<int32_t>()[5] = static_cast<int32_t>(k);
  try {
    softmax_cross_entropy(on_dut(random64(Shape{n, k}, 30), DType::F32), raw_on_dut(bad), valid, 0, 1, false,
                          Tensor());
    ADD_FAILURE() << "an out-of-range label was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 of sample 5"), std::string::npos) << e.what();
  }
}

// The vocabulary-parallel cross-entropy's three passes on the last shard of a vocabulary of 70 split
// in two (columns 40..79, of which 70..79 padding): the per-row statistics, the counts above the
// label and the gradient, against the CPU in float64 on the values the DUT holds. Rows past
// n_valid stay 0 in the statistics and get a zero gradient.
TEST(CudaOps, VocabShardCrossEntropyPasses) {
  const int64_t n = 7, valid = 6, width = 40, col0 = 40, vocab = 70;
  Tensor labels(Shape{n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 13 + 5) % vocab);
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor z = random64(Shape{n, width}, 31, -3, 3);
    const Tensor dz_in = on_dut(z, d);
    const Tensor zr = host64(dz_in);
    Tensor stats(Shape{4, n}, DType::F64, dut()), rstats(Shape{4, n}, DType::F64);
    Tensor above(Shape{n}, DType::F64, dut()), rabove(Shape{n}, DType::F64);
    Tensor dz(Shape{n, width}, d, dut()), rdz(Shape{n, width}, DType::F64);
    for (const Tensor* t : {&stats, &rstats, &above, &rabove}) fill(*t, 0.0);
    fill(dz, 5.0);  // padding columns and rows must come back 0
    vocab_shard_max(dz_in, valid, col0, vocab, stats);
    vocab_shard_max(zr, valid, col0, vocab, rstats);
    expect_close(stats, rstats, EXACT, "row maxima");
    vocab_shard_sums(dz_in, raw_on_dut(labels), valid, col0, vocab, stats);
    vocab_shard_sums(zr, labels, valid, col0, vocab, rstats);
    expect_close(stats, rstats, {1e-12, 1e-12}, "row sums");
    vocab_shard_grad(dz_in, raw_on_dut(labels), valid, col0, vocab, 0.1, 1.0 / valid, stats, dz, above);
    vocab_shard_grad(zr, labels, valid, col0, vocab, 0.1, 1.0 / valid, rstats, rdz, rabove);
    expect_close(above, rabove, EXACT, "logits above the label");
    expect_close(dz, rdz, tol_for(d), "dlogits");
  }
}

TEST(CudaOps, SquaredError) {
  const int64_t n = 21, k = 3, valid = 17;
  for (DType d : float_dtypes()) {
    const Tensor y = random64(Shape{n, k}, 31), t = random64(Shape{n, k}, 32);
    Tensor dy(Shape{n, k}, d, dut()), rdy(Shape{n, k}, DType::F64);
    const double got = squared_error(on_dut(y, d), on_dut(t, d), valid, 0.5, dy);
    const double want = squared_error(rounded64(y, d), rounded64(t, d), valid, 0.5, rdy);
    EXPECT_NEAR(got, want, 1e-12 * valid) << dtype_name(d);
    expect_close(dy, rdy, tol_for(d), std::string("mse gradient ") + dtype_name(d));
  }
}

// ---- convolution (cuDNN on the GPU) ----------------------------------------------------------

TEST(CudaOps, Convolution) {
  struct Case {
    ConvShape g;
    int64_t out;
    bool bias;
  };
  const Case cases[] = {{ConvShape::make(1, 3, 8, 8, 3, 1, 1), 4, true},
                        {ConvShape::make(1, 4, 9, 9, 3, 2, 1), 6, true},
                        {ConvShape::make(1, 4, 8, 8, 1, 2, 0), 8, false},
                        {ConvShape::make(1, 2, 10, 10, 5, 1, 0), 3, true}};
  // A weight that is a view at an odd offset of the flat buffer is not
  // 16-byte aligned: cuDNN does not get it, the GPU lowering does (case 0 again).
  auto offset_view = [](const Tensor& t) {
    const Tensor big(Shape{t.count() + 1}, t.dtype(), t.device());
    Tensor view = big.slice(1, t.shape());
    copy(t, view);
    return view;
  };
  for (DType d : float_dtypes())
    for (size_t ci = 0; ci <= std::size(cases); ++ci) {
      const bool misaligned = ci == std::size(cases);
      const Case& c = cases[misaligned ? 0 : ci];
      const ConvShape& g = c.g;
      SCOPED_TRACE(std::string(dtype_name(d)) + " k" + std::to_string(g.kernel) + " s" +
                   std::to_string(g.stride) + (misaligned ? " (misaligned weight: lowering)" : ""));
      const int64_t n = 3;
      const Shape ys{n, c.out, g.out_h, g.out_w};
      const Tensor x = random64(Shape{n, g.channels, g.height, g.width}, 33),
                   w = random64(Shape{c.out, g.channels, g.kernel, g.kernel}, 34);
      const Tensor b = random64(Shape{c.out}, 35), dyv = random64(ys, 36);
      const Tensor bias = c.bias ? on_dut(b, d) : Tensor(), rbias = c.bias ? rounded64(b, d) : Tensor();
      nn::ConvScratch s1, s2;
      const Tensor wd = misaligned ? offset_view(on_dut(w, d)) : on_dut(w, d);
      Tensor y(ys, d, dut()), ry(ys, DType::F64);
      nn::conv2d_forward(on_dut(x, d), wd, bias, g, y, s1);
      nn::conv2d_forward(rounded64(x, d), rounded64(w, d), rbias, g, ry, s2);
      Tol t = tol_for(d);
      if (d == DType::F32) t.rtol = 1e-4;  // up to 125-term sums in another order
      expect_close(y, ry, t, "forward");

      Tensor dw = misaligned ? offset_view(on_dut(w, d)) : on_dut(w, d);  // the weight gradient accumulates
      Tensor rdw = rounded64(w, d);
      Tensor db = c.bias ? on_dut(b, d) : Tensor(), rdb = c.bias ? rounded64(b, d) : Tensor();
      Tensor dx(x.shape(), d, dut()), rdx(x.shape(), DType::F64);
      nn::conv2d_backward(on_dut(x, d), wd, on_dut(dyv, d), g, dw, db, dx, s1);
      nn::conv2d_backward(rounded64(x, d), rounded64(w, d), rounded64(dyv, d), g, rdw, rdb, rdx, s2);
      Tol tw = t;
      tw.atol *= 10;  // dW sums n·P = up to 192 products
      expect_close(dw, rdw, tw, "dweight");
      if (c.bias) expect_close(db, rdb, tw, "dbias");
      expect_close(dx, rdx, t, "dx");
    }
}

// ---- optimizer and mixed precision -------------------------------------------------------

TEST(CudaOps, OptimizerUpdates) {
  struct Rule {
    OptimRule rule;
    double momentum;
    bool nesterov;
  };
  const Rule rules[] = {{OptimRule::SGD, 0, false},
                        {OptimRule::SGD, 0.9, false},
                        {OptimRule::SGD, 0.9, true},
                        {OptimRule::ADAM, 0, false},
                        {OptimRule::ADAMW, 0, false}};
  for (DType d : {DType::F64, DType::F32})
    for (const Rule& r : rules) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " rule " + std::to_string(int(r.rule)) + " momentum " +
                   std::to_string(r.momentum) + (r.nesterov ? " nesterov" : ""));
      const int64_t n = 5000;
      const Tensor p = random64(Shape{n}, 37), g = random64(Shape{n}, 38);
      Tensor dp = on_dut(p, d), dg = on_dut(g, d), da(Shape{n}, d, dut()), db(Shape{n}, d, dut());
      Tensor hp = host_as(p, d), hg = host_as(g, d), ha(Shape{n}, d), hb(Shape{n}, d);
      OptimHyper h;
      h.rule = r.rule;
      h.lr = 0.01;
      h.weight_decay = 0.05;
      h.momentum = r.momentum;
      h.nesterov = r.nesterov;
      for (int64_t step = 1; step <= 3; ++step) {
        h.step = step;
        // Two runs of elements, one with and one without weight decay, like the optimizer's segments.
        optim_update(h, true, dp, dg, da, db, 0, n / 2);
        optim_update(h, false, dp, dg, da, db, n / 2, n - n / 2);
        optim_update(h, true, hp, hg, ha, hb, 0, n / 2);
        optim_update(h, false, hp, hg, ha, hb, n / 2, n - n / 2);
      }
      const Tol t = d == DType::F64 ? Tol{1e-14, 1e-12} : Tol{1e-7, 1e-5};
      expect_close(dp, host64(hp), t, "params");
      if (r.rule != OptimRule::SGD || r.momentum != 0) expect_close(da, host64(ha), t, "state a");
      if (r.rule != OptimRule::SGD) expect_close(db, host64(hb), t, "state b");
    }
}

TEST(CudaOps, UnscaleAndNonFiniteCount) {
  for (DType d : float_dtypes()) {
    if (d == DType::F64) continue;  // 16-bit and fp32 gradients only
    SCOPED_TRACE(dtype_name(d));
    Tensor g = random64(Shape{1000}, 39, -8, 8);
    g.data<double>()[10] = std::numeric_limits<double>::infinity();
    g.data<double>()[500] = std::nan("");
    const Tensor dg = on_dut(g, d);
    Tensor out(Shape{1000}, DType::F32, dut());
    EXPECT_EQ(unscale_grads(dg, out, 0.25), 2);
    EXPECT_EQ(count_nonfinite(dg), 2);
    Tensor ref = rounded64(g, d);
    scale(ref, 0.25);
    expect_close(out, ref, EXACT, "unscaled");  // × a power of two: exact
  }
}

// ---- memory ------------------------------------------------------------------------------

TEST(CudaOps, MemoryAccountingAndOutOfMemory) {
  if (self_check()) GTEST_SKIP() << "device memory only";
  const DeviceMemoryStats before = device_memory_stats();
  {
    Tensor big(Shape{int64_t(64) << 20}, DType::U8, Device::CUDA);
    const DeviceMemoryStats during = device_memory_stats();
    EXPECT_GE(during.in_use, before.in_use + (size_t(64) << 20));
    EXPECT_GE(during.peak, during.in_use);
    EXPECT_GT(during.total, during.in_use);
  }
  EXPECT_EQ(device_memory_stats().in_use, before.in_use);
  try {
    Tensor impossible(Shape{int64_t(1) << 50}, DType::U8, Device::CUDA);  // a petabyte
    ADD_FAILURE() << "a 1 PiB allocation succeeded";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of GPU memory"), std::string::npos) << m;
    EXPECT_NE(m.find("largest allocation"), std::string::npos) << m;
    EXPECT_NE(m.find("--train.batch_size"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hpc::test

HPC_DEVICE_TEST_MAIN()
