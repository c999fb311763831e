// Layer tests: a finite-difference gradient check of every layer (dx and
// every parameter, every element), forward values against independent
// references (naive convolution, BatchNorm formulas, float32 vs float64),
// gradient accumulation, SyncBatchNorm over a 2-rank fake communicator,
// and the error messages for bad layer arguments.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <functional>
#include <thread>

#include "core/error.h"
#include "dist/communicator.h"
#include "fake_comm.h"
#include "grad_check.h"
#include "kernels/activation_math.h"
#include "kernels/random.h"
#include "nn/layers/layers.h"

namespace hpc::nn {
namespace {

using test::bind_layer;
using test::BoundLayer;
using test::layer_args;
using test::random_tensor;

constexpr double GRAD_TOL = 1e-6;  // see grad_check.h

double check(const LayerArgs& a, const Shape& in, int64_t batch, const RunCtx& ctx = {}) {
  return test::GradientChecker(1e-5, GRAD_TOL).check(a, in, batch, ctx);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.count(), b.count());
  Tensor a64(a.shape(), DType::F64), b64(b.shape(), DType::F64);
  backend::convert(a, a64);
  backend::convert(b, b64);
  double m = 0;
  for (int64_t i = 0; i < a.count(); ++i)
    m = std::max(m, std::abs(a64.data<double>()[i] - b64.data<double>()[i]));
  return m;
}

// ---- gradient checks --------------------------------------------------------

TEST(LayerGrad, Linear) {
  check(layer_args("linear", {5}), Shape{7}, 3);
  check(layer_args("linear", {4}, {{"bias", 0}}), Shape{2, 3}, 2);  // rank-2 input is flattened
}

TEST(LayerGrad, ConvStridePadNonSquare) {
  check(layer_args("conv", {4, 3}, {{"stride", 2}, {"pad", 1}}), Shape{3, 5, 7}, 2);
  check(layer_args("conv", {2, 3}), Shape{2, 4, 6}, 2);
  check(layer_args("conv", {3, 1}, {{"bias", 0}}), Shape{2, 3, 3}, 2);
  check(layer_args("conv", {2, 4}, {{"stride", 3}, {"pad", 2}}), Shape{1, 6, 5}, 2);
  check(layer_args("conv", {2, 3}, {{"pad", 1}}), Shape{2, 3, 4}, 2);  // stride 1, same size: block path
  check(layer_args("conv", {2, 5}, {{"pad", 2}}), Shape{2, 2, 3}, 2);  // taps that see only padding
}

TEST(LayerGrad, ConvInChunks) {
  // One sample per chunk, and chunks of 2 with a partial last one: the batched GEMM path and its edges.
  for (int64_t budget : {1, 2 * 18 * 9}) {  // columns per sample: 18 rows × 9 pixels
    BoundLayer b =
        bind_layer(layer_args("conv", {3, 3}, {{"stride", 2}, {"pad", 1}}), Shape{2, 5, 6}, DType::F64, 4);
    dynamic_cast<Conv2d&>(*b.layer).set_column_budget(budget);
    BoundLayer whole =
        bind_layer(layer_args("conv", {3, 3}, {{"stride", 2}, {"pad", 1}}), Shape{2, 5, 6}, DType::F64, 4);
    const Tensor x = random_tensor(Shape{5, 2, 5, 6}, DType::F64, 5);
    const Tensor dy = random_tensor(b.output(5).shape(), DType::F64, 6);
    Tensor y1 = b.output(5), y2 = whole.output(5), dx1 = b.input_grad(5), dx2 = whole.input_grad(5);
    b.layer->forward(x, y1, {});
    whole.layer->forward(x, y2, {});
    b.layer->backward(x, y1, dy, dx1, {});
    whole.layer->backward(x, y2, dy, dx2, {});
    EXPECT_LT(max_abs_diff(y1, y2), 1e-12) << "budget " << budget;
    EXPECT_LT(max_abs_diff(dx1, dx2), 1e-12) << "budget " << budget;
    EXPECT_LT(max_abs_diff(b.grads, whole.grads), 1e-12) << "budget " << budget;
  }
}

TEST(LayerGrad, Pooling) {
  check(layer_args("maxpool", {2}), Shape{2, 4, 6}, 2);
  check(layer_args("maxpool", {3}, {{"stride", 2}}), Shape{2, 5, 7}, 2);              // overlapping windows
  check(layer_args("maxpool", {3}, {{"stride", 2}, {"pad", 1}}), Shape{2, 6, 8}, 2);  // ResNet's stem pool
  check(layer_args("avgpool", {2}), Shape{2, 4, 6}, 2);
  check(layer_args("avgpool", {3}, {{"stride", 1}}), Shape{1, 4, 5}, 2);
  check(layer_args("gap"), Shape{3, 3, 4}, 2);
}

TEST(LayerGrad, BatchNormTrain) {
  check(layer_args("bn"), Shape{5}, 4);        // 1d
  check(layer_args("bn"), Shape{3, 2, 3}, 3);  // 2d, per channel over N·H·W
  check(layer_args("bn"), Shape{2, 5}, 3);     // [C, L]
}

TEST(LayerGrad, BatchNormEval) {
  RunCtx eval;
  eval.training = false;
  check(layer_args("bn"), Shape{3, 2, 2}, 2, eval);
}

TEST(LayerGrad, Activations) {
  check(layer_args("relu"), Shape{4, 5}, 3);
  check(layer_args("gelu"), Shape{4, 5}, 3);
  check(layer_args("tanh"), Shape{4, 5}, 3);
  check(layer_args("flatten"), Shape{2, 3, 2}, 2);
}

TEST(LayerGrad, DropoutWithFixedMask) {
  RunCtx ctx;
  ctx.seed = 11;
  ctx.step = 3;
  ctx.layer = 2;
  check(layer_args("dropout", {0.3}), Shape{6, 5}, 3, ctx);
}

TEST(LayerGrad, ResidualIdentity) {
  const LayerArgs a =
      layer_args("res", {}, {},
                 {layer_args("conv", {3, 3}, {{"pad", 1}}), layer_args("bn"), layer_args("relu"),
                  layer_args("conv", {3, 3}, {{"pad", 1}}), layer_args("bn")});
  check(a, Shape{3, 4, 5}, 2);
  auto layer = make_layer(a);
  EXPECT_EQ(layer->build(Shape{3, 4, 5}, DType::F64), (Shape{3, 4, 5}));
  EXPECT_FALSE(dynamic_cast<Residual&>(*layer).has_projection());
}

TEST(LayerGrad, ResidualProjection) {
  const LayerArgs a =
      layer_args("res", {}, {},
                 {layer_args("conv", {4, 3}, {{"stride", 2}, {"pad", 1}}), layer_args("bn"),
                  layer_args("relu"), layer_args("conv", {4, 3}, {{"pad", 1}}), layer_args("bn")});
  check(a, Shape{2, 5, 6}, 2);
  auto layer = make_layer(a);
  EXPECT_EQ(layer->build(Shape{2, 5, 6}, DType::F64), (Shape{4, 3, 3}));
  EXPECT_TRUE(dynamic_cast<Residual&>(*layer).has_projection());
  std::vector<std::string> names;
  for (const auto& s : layer->param_specs()) names.push_back(s.name);
  const std::vector<std::string> expected{"body.0.weight",    "body.0.bias",    "body.1.gamma",
                                          "body.1.beta",      "body.3.weight",  "body.3.bias",
                                          "body.4.gamma",     "body.4.beta",    "shortcut.0.weight",
                                          "shortcut.1.gamma", "shortcut.1.beta"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(layer->buffers().size(), 6u);  // running mean and var of three bn layers
  // Flat inputs project with a bias-free linear.
  check(layer_args("res", {}, {}, {layer_args("linear", {3}), layer_args("tanh")}), Shape{5}, 3);
}

// ---- forward values -----------------------------------------------------------

// y[s,o,i,j] = b[o] + Σ w[o,c,ki,kj]·x[s,c,i·stride−pad+ki, j·stride−pad+kj], straight from the definition.
double direct_conv_error(int64_t c, int64_t h, int64_t w, int64_t oc, int64_t k, int64_t stride,
                         int64_t pad) {
  const int64_t n = 3;
  BoundLayer b = bind_layer(layer_args("conv", {double(oc), double(k)}, {{"stride", stride}, {"pad", pad}}),
                            Shape{c, h, w}, DType::F64, 21);
  const int64_t ho = (h + 2 * pad - k) / stride + 1, wo = (w + 2 * pad - k) / stride + 1;
  EXPECT_EQ(b.out_shape, (Shape{oc, ho, wo}));
  const Tensor x = random_tensor(Shape{n, c, h, w}, DType::F64, 22);
  Tensor y = b.output(n);
  b.layer->forward(x, y, {});
  const double* wt = b.param_views[0].data<double>();
  const double* bias = b.param_views[1].data<double>();
  double worst = 0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double ref = bias[o];
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t ki = 0; ki < k; ++ki)
              for (int64_t kj = 0; kj < k; ++kj) {
                const int64_t ih = i * stride - pad + ki, iw = j * stride - pad + kj;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                ref +=
                    wt[((o * c + ci) * k + ki) * k + kj] * x.data<double>()[((s * c + ci) * h + ih) * w + iw];
              }
          worst = std::max(worst, std::abs(ref - y.data<double>()[((s * oc + o) * ho + i) * wo + j]));
        }
  return worst;
}

TEST(LayerForward, ConvMatchesDirectConvolution) {
  // Strided and unpadded shapes take the general im2col; stride 1 with "same" padding the block-copy path.
  EXPECT_LT(direct_conv_error(2, 5, 7, 3, 3, 2, 1), 1e-12);
  EXPECT_LT(direct_conv_error(2, 6, 5, 3, 3, 1, 0), 1e-12);
  EXPECT_LT(direct_conv_error(2, 3, 8, 2, 2, 3, 1), 1e-12);
  EXPECT_LT(direct_conv_error(3, 4, 5, 2, 3, 1, 1), 1e-12);  // same width
  EXPECT_LT(direct_conv_error(2, 2, 3, 2, 5, 1, 2), 1e-12);  // same width, taps entirely in the padding
  EXPECT_LT(direct_conv_error(2, 1, 1, 2, 3, 1, 1), 1e-12);  // 1x1 image
  EXPECT_LT(direct_conv_error(3, 4, 3, 2, 1, 1, 0), 1e-12);  // 1x1 kernel
}

TEST(LayerForward, LinearUsesPyTorchLayout) {
  // y[n,o] = Σ_i W[o,i]·x[n,i] + b[o] with W stored [out, in].
  BoundLayer b = bind_layer(layer_args("linear", {3}), Shape{4}, DType::F64, 25);
  ASSERT_EQ(b.specs[0].shape, (Shape{3, 4}));
  const Tensor x = random_tensor(Shape{2, 4}, DType::F64, 26);
  Tensor y = b.output(2);
  b.layer->forward(x, y, {});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t o = 0; o < 3; ++o) {
      double ref = b.param_views[1].data<double>()[o];
      for (int64_t i = 0; i < 4; ++i)
        ref += b.param_views[0].data<double>()[o * 4 + i] * x.data<double>()[n * 4 + i];
      EXPECT_NEAR(y.data<double>()[n * 3 + o], ref, 1e-14);
    }
}

TEST(LayerForward, Float32AgreesWithFloat64) {
  // float32 rounding (6e-8 relative) over sums of ≤ 50 terms of size ~1: 1e-4 leaves a wide margin
  // while a wrong index or missing term shows up at 1e-1.
  const std::vector<std::pair<LayerArgs, Shape>> cases{
      {layer_args("linear", {6}), Shape{10}},
      {layer_args("conv", {4, 3}, {{"stride", 2}, {"pad", 1}}), Shape{3, 6, 5}},
      {layer_args("maxpool", {2}), Shape{2, 4, 4}},
      {layer_args("avgpool", {2}), Shape{2, 4, 4}},
      {layer_args("gap"), Shape{2, 4, 4}},
      {layer_args("bn"), Shape{3, 2, 2}},
      {layer_args("gelu"), Shape{8}},
      {layer_args("tanh"), Shape{8}},
      {layer_args("res", {}, {},
                  {layer_args("conv", {2, 3}, {{"pad", 1}}), layer_args("bn"), layer_args("relu")}),
       Shape{2, 3, 3}},
  };
  for (const auto& [args, shape] : cases) {
    BoundLayer d = bind_layer(args, shape, DType::F64, 31);
    BoundLayer f = bind_layer(args, shape, DType::F32, 31, d.params);
    const Tensor x64 = random_tensor(shape.with_batch(4), DType::F64, 32);
    Tensor x32(x64.shape(), DType::F32);
    backend::convert(x64, x32);
    Tensor y64 = d.output(4), y32 = f.output(4);
    d.layer->forward(x64, y64, {});
    f.layer->forward(x32, y32, {});
    EXPECT_LT(max_abs_diff(y64, y32), 1e-4) << args.text;
  }
}

TEST(LayerForward, Activations) {
  EXPECT_EQ(kernels::relu_forward(-2.0), 0.0);
  EXPECT_EQ(kernels::relu_forward(3.0), 3.0);
  // GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) evaluated independently.
  for (double v : {-3.0, -1.0, 0.0, 0.5, 2.0}) {
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(kernels::gelu_forward(v), ref, 1e-15);
  }
  EXPECT_NEAR(kernels::gelu_forward(1.0), 0.8411919906082768, 1e-12);  // GPT-2's gelu(1)
  EXPECT_NEAR(kernels::tanh_forward(0.5), std::tanh(0.5), 1e-15);
}

TEST(LayerForward, BatchNormTrainAndEval) {
  const int64_t n = 4, c = 3, hw = 2;
  BoundLayer b = bind_layer(layer_args("bn"), Shape{c, 1, hw}, DType::F64, 41);
  const Tensor x = random_tensor(Shape{n, c, 1, hw}, DType::F64, 42, -2, 3);
  Tensor y = b.output(n);
  b.layer->forward(x, y, {});
  auto bufs = b.layer->buffers();
  ASSERT_EQ(bufs.size(), 2u);
  EXPECT_EQ(bufs[0].first, "running_mean");
  const double* gamma = b.param_views[0].data<double>();
  const double* beta = b.param_views[1].data<double>();
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t k = 0; k < hw; ++k) mean += x.data<double>()[(s * c + ch) * hw + k] / (n * hw);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t k = 0; k < hw; ++k)
        var += std::pow(x.data<double>()[(s * c + ch) * hw + k] - mean, 2) / (n * hw);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t k = 0; k < hw; ++k) {
        const int64_t i = (s * c + ch) * hw + k;
        EXPECT_NEAR(y.data<double>()[i],
                    gamma[ch] * (x.data<double>()[i] - mean) / std::sqrt(var + 1e-5) + beta[ch], 1e-12);
      }
    // PyTorch: running = 0.9·running + 0.1·batch, unbiased variance, from (0, 1).
    EXPECT_NEAR(bufs[0].second.data<double>()[ch], 0.1 * mean, 1e-12);
    EXPECT_NEAR(bufs[1].second.data<double>()[ch], 0.9 + 0.1 * var * (n * hw) / (n * hw - 1), 1e-12);
  }
  // Eval mode normalises with the running statistics, whatever the batch.
  RunCtx eval;
  eval.training = false;
  backend::copy(random_tensor(Shape{c}, DType::F64, 43), bufs[0].second);
  backend::copy(random_tensor(Shape{c}, DType::F64, 44, 0.5, 2), bufs[1].second);
  b.layer->forward(x, y, eval);
  for (int64_t i = 0; i < x.count(); ++i) {
    const int64_t ch = (i / hw) % c;
    const double ref = gamma[ch] * (x.data<double>()[i] - bufs[0].second.data<double>()[ch]) /
                           std::sqrt(bufs[1].second.data<double>()[ch] + 1e-5) +
                       beta[ch];
    EXPECT_NEAR(y.data<double>()[i], ref, 1e-12);
  }
}

TEST(LayerForward, DropoutMask) {
  const double p = 0.3;
  BoundLayer b = bind_layer(layer_args("dropout", {p}), Shape{100, 100}, DType::F64, 1);
  const Tensor x = random_tensor(Shape{1, 100, 100}, DType::F64, 51, 1, 2);
  // cppcheck-suppress duplicateAssignExpression ; each output() is a new tensor
  Tensor y1 = b.output(1), y2 = b.output(1), y3 = b.output(1);
  RunCtx ctx;
  ctx.seed = 5;
  ctx.step = 1;
  b.layer->forward(x, y1, ctx);
  b.layer->forward(x, y2, ctx);
  ctx.step = 2;
  b.layer->forward(x, y3, ctx);
  int64_t kept = 0, same_as_next_step = 0;
  for (int64_t i = 0; i < x.count(); ++i) {
    const double v = y1.data<double>()[i];
    ASSERT_EQ(v, y2.data<double>()[i]);  // a pure function of (seed, step, layer)
    if (v != 0) {
      ++kept;
      EXPECT_NEAR(v, x.data<double>()[i] / (1 - p), 1e-15);
    }
    same_as_next_step += (v != 0) == (y3.data<double>()[i] != 0);
  }
  // 10⁴ Bernoulli(0.7) draws: σ of the kept fraction is 0.0046; 0.02 is > 4σ.
  EXPECT_NEAR(double(kept) / double(x.count()), 1 - p, 0.02);
  // Independent masks agree on p² + (1−p)² = 58% of elements, not 100%.
  EXPECT_NEAR(double(same_as_next_step) / double(x.count()), p * p + (1 - p) * (1 - p), 0.03);
  RunCtx eval;
  eval.training = false;
  b.layer->forward(x, y1, eval);
  EXPECT_EQ(max_abs_diff(x, y1), 0.0);
}

TEST(LayerForward, DropoutMaskIsTheCounterRng) {
  // The op's contract, shared with the future GPU kernel: element i is kept iff
  // random_uniform(seed, stream, offset + i) ≥ p, and kept elements are scaled by 1/(1 − p).
  const double p = 0.4;
  const Tensor x = random_tensor(Shape{1000}, DType::F32, 52, 1, 2);
  Tensor y(x.shape(), DType::F32);
  backend::dropout_forward(x, p, 9, 77, 5000, y);
  for (int64_t i = 0; i < x.count(); ++i) {
    const bool keep = kernels::random_uniform(9, 77, 5000 + uint64_t(i)) >= p;
    ASSERT_EQ(y.data<float>()[i], keep ? x.data<float>()[i] * float(1 / (1 - p)) : 0.0f) << i;
  }
}

TEST(LayerForward, DropoutRanksDrawTheSingleRankMask) {
  // Rank r draws the indices rank 0 would use for rows r·b…(r+1)·b of one big batch.
  BoundLayer b = bind_layer(layer_args("dropout", {0.5}), Shape{6}, DType::F64, 1);
  const Tensor x = random_tensor(Shape{4, 6}, DType::F64, 53, 1, 2);
  Tensor whole = b.output(4), part = b.output(2);
  RunCtx ctx;
  ctx.seed = 3;
  b.layer->forward(x, whole, ctx);
  ctx.rank = 1;
  b.layer->forward(x.rows(2, 4), part, ctx);
  EXPECT_EQ(max_abs_diff(part, whole.rows(2, 4)), 0.0);
}

// ---- gradient accumulation --------------------------------------------------------

TEST(LayerBackward, ParameterGradientsAccumulate) {
  for (const auto& [args, shape] : std::vector<std::pair<LayerArgs, Shape>>{
           {layer_args("linear", {3}), Shape{4}},
           {layer_args("conv", {2, 3}, {{"pad", 1}}), Shape{2, 4, 4}},
           {layer_args("bn"), Shape{2, 3, 3}},
           {layer_args("res", {}, {}, {layer_args("conv", {3, 1}), layer_args("bn")}), Shape{2, 3, 3}}}) {
    BoundLayer b = bind_layer(args, shape, DType::F64, 61);
    const Tensor x = random_tensor(shape.with_batch(3), DType::F64, 62);
    Tensor y = b.output(3), dx = b.input_grad(3);
    const Tensor dy = random_tensor(y.shape(), DType::F64, 63);
    b.layer->forward(x, y, {});
    b.layer->backward(x, y, dy, dx, {});
    Tensor once(b.grads.shape(), DType::F64);
    backend::copy(b.grads, once);
    b.layer->backward(x, y, dy, Tensor(), {});  // no dx: parameter gradients only
    backend::axpy(-2.0, once, b.grads);
    EXPECT_LT(std::sqrt(backend::sum_squares(b.grads)), 1e-12) << args.text;
    EXPECT_GT(backend::sum_squares(once), 0.0) << args.text;
  }
}

// ---- SyncBatchNorm ---------------------------------------------------------------------

TEST(SyncBatchNorm, TwoRanksEqualOneRankOnTheWholeBatch) {
  const Shape in{3, 2, 2};
  const int64_t per_rank = 2;
  BoundLayer single = bind_layer(layer_args("bn"), in, DType::F64, 71);
  BoundLayer ranks[2] = {bind_layer(layer_args("bn"), in, DType::F64, 71),
                         bind_layer(layer_args("bn"), in, DType::F64, 71)};
  const Tensor x = random_tensor(in.with_batch(2 * per_rank), DType::F64, 72, -1, 2);
  const Tensor dy = random_tensor(x.shape(), DType::F64, 73);
  Tensor y = single.output(2 * per_rank), dx = single.input_grad(2 * per_rank);
  single.layer->forward(x, y, {});
  single.layer->backward(x, y, dy, dx, {});

  test::FakeComm::Group shared(2);  // two ranks in two threads: their sums really add up
  Tensor ry[2], rdx[2];
  int comms[2] = {0, 0};  // sums each rank reduced
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    ry[r] = ranks[r].output(per_rank);
    rdx[r] = ranks[r].input_grad(per_rank);
    threads.emplace_back([&, r] {
      test::FakeComm comm(r, 2, &shared);
      RunCtx ctx;
      ctx.sum_over_replicas = dist::replica_sum(comm);
      const Tensor xr = x.rows(r * per_rank, (r + 1) * per_rank);
      ranks[r].layer->forward(xr, ry[r], ctx);
      ranks[r].layer->backward(xr, ry[r], dy.rows(r * per_rank, (r + 1) * per_rank), rdx[r], ctx);
      comms[r] = comm.count("allreduce_before_compute");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r)  // statistics in forward, gradient sums in backward
    EXPECT_EQ(comms[r], 2) << "rank " << r;
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(max_abs_diff(ry[r], y.rows(r * per_rank, (r + 1) * per_rank)), 1e-12) << "rank " << r;
    EXPECT_LT(max_abs_diff(rdx[r], dx.rows(r * per_rank, (r + 1) * per_rank)), 1e-12) << "rank " << r;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_LT(max_abs_diff(ranks[r].layer->buffers()[i].second, single.layer->buffers()[i].second), 1e-12);
  }
  // gamma/beta gradients are local: their sum over ranks is the single-rank gradient.
  Tensor summed(single.grads.shape(), DType::F64);
  backend::elementwise_add(ranks[0].grads, ranks[1].grads, summed);
  EXPECT_LT(max_abs_diff(summed, single.grads), 1e-12);
}

// ---- bad arguments ------------------------------------------------------------

void expect_layer_error(const LayerArgs& args, const Shape& in, const std::string& needle) {
  try {
    make_layer(args)->build(in, DType::F32);
    ADD_FAILURE() << args.text << " on " << in.str() << ": no error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer '" + args.text + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(LayerArgs, BadArgumentsNameTheLayer) {
  expect_layer_error(layer_args("linear"), Shape{4}, "missing argument 'out'");
  expect_layer_error(layer_args("conv", {32}), Shape{1, 8, 8}, "missing argument 'kernel'");
  expect_layer_error(layer_args("conv", {32, 0}), Shape{1, 8, 8}, "kernel must be at least 1");
  expect_layer_error(layer_args("conv", {32, 3}, {{"pad", -1}}), Shape{1, 8, 8}, "pad must be at least 0");
  expect_layer_error(layer_args("conv", {32, 2.5}), Shape{1, 8, 8}, "whole number");
  expect_layer_error(layer_args("conv", {32, 3}, {{"pading", 1}}), Shape{1, 8, 8},
                     "unknown argument 'pading'");
  expect_layer_error(layer_args("conv", {32, 3, 1, 1, 1, 9}), Shape{1, 8, 8}, "at most 5 arguments");
  expect_layer_error(layer_args("conv", {32, 7}), Shape{1, 5, 5},
                     "kernel 7 larger than the 5x5 input (pad 0)");
  expect_layer_error(layer_args("conv", {32, 3}), Shape{784}, "needs a CxHxW input, got 784");
  expect_layer_error(layer_args("maxpool", {2}), Shape{3, 7, 7}, "do not tile the 7x7 input");
  expect_layer_error(layer_args("avgpool", {4}), Shape{3, 3, 3}, "kernel 4 larger");
  expect_layer_error(layer_args("avgpool", {3}, {{"pad", 1}}), Shape{3, 8, 8}, "pad applies to maxpool only");
  expect_layer_error(layer_args("maxpool", {3}, {{"pad", 2}}), Shape{3, 8, 8}, "at most half the kernel");
  expect_layer_error(layer_args("maxpool", {3}, {{"stride", 3}, {"pad", 1}}), Shape{3, 9, 9}, "do not tile");
  expect_layer_error(layer_args("bn", {}, {{"gamma", 0.5}}), Shape{4}, "must be 1 or 0");
  expect_layer_error(layer_args("gap"), Shape{10}, "needs a CxHxW input");
  expect_layer_error(layer_args("dropout", {1}), Shape{4}, "p must be in [0, 1)");
  expect_layer_error(layer_args("dropout", {-0.1}), Shape{4}, "p must be in [0, 1)");
  expect_layer_error(layer_args("bn", {}, {{"eps", 0}}), Shape{4}, "eps must be > 0");
  expect_layer_error(layer_args("relu", {1}), Shape{4}, "takes no arguments");
  expect_layer_error(layer_args("linear", {4}, {}, {layer_args("relu")}), Shape{4}, "not nested layers");
  expect_layer_error(layer_args("res"), Shape{4}, "needs the layers of its body");
  expect_layer_error(layer_args("res", {}, {}, {layer_args("flatten")}), Shape{2, 3, 3},
                     "projection shortcut exists only");
  expect_layer_error(layer_args("frobnicate", {3}), Shape{4},
                     "unknown layer 'frobnicate' (known: attn, avgpool, block, bn");
}

TEST(LayerArgs, SpecRoundTrip) {
  const std::vector<std::pair<LayerArgs, std::string>> cases{
      {layer_args("conv", {32, 3}, {{"pad", 1}}), "conv(32,3,stride=1,pad=1)"},
      {layer_args("conv", {8, 1, 2, 0, 0}), "conv(8,1,stride=2,pad=0,bias=0)"},
      {layer_args("linear", {10}), "linear(10)"},
      {layer_args("maxpool", {3}, {{"stride", 2}}), "maxpool(3,stride=2)"},
      {layer_args("maxpool", {3}, {{"stride", 2}, {"pad", 1}}), "maxpool(3,stride=2,pad=1)"},
      {layer_args("bn", {}, {{"gamma", 0}}), "bn(gamma=0)"},
      {layer_args("dropout", {0.25}), "dropout(0.25)"},
      {layer_args("dropout", {0.123456789}),
       "dropout(0.123456789)"},  // exact: specs are stored in checkpoints
      {layer_args("bn", {}, {{"momentum", 0.01}}), "bn(momentum=0.01)"},
      {layer_args("bn"), "bn"},
      {layer_args("res", {}, {}, {layer_args("conv", {4, 3}, {{"pad", 1}}), layer_args("relu")}),
       "res(conv(4,3,stride=1,pad=1) relu)"},
  };
  for (const auto& [args, text] : cases) EXPECT_EQ(make_layer(args)->spec(), text);
}

TEST(LayerArgs, ParamSpecsAndFlops) {
  auto conv = make_layer(layer_args("conv", {8, 3}, {{"pad", 1}}));
  EXPECT_EQ(conv->build(Shape{4, 6, 5}, DType::F32), (Shape{8, 6, 5}));
  const auto specs = conv->param_specs();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (Shape{8, 4, 3, 3}));
  EXPECT_EQ(specs[0].init, Init::KaimingUniform);
  EXPECT_EQ(specs[0].fan_in, 36);
  EXPECT_FALSE(specs[1].weight_decay);
  EXPECT_EQ(conv->forward_flops(), 2 * 8 * 36 * 30);
  auto lin = make_layer(layer_args("linear", {10}));
  lin->build(Shape{2, 3, 4}, DType::F32);
  EXPECT_EQ(lin->forward_flops(), 2 * 24 * 10);
  EXPECT_EQ(lin->param_specs()[0].shape, (Shape{10, 24}));
  auto bn = make_layer(layer_args("bn"));
  bn->build(Shape{5}, DType::F32);
  EXPECT_EQ(bn->param_specs()[0].init, Init::Ones);
  EXPECT_FALSE(bn->param_specs()[0].weight_decay);
}

}  // namespace
}  // namespace hpc::nn
