// Relus folded into the layer before (nn/fusion.h): which relus a chain
// folds, that the fused ops give the bits of the op and a separate relu (plain
// and channel-blocked, float32 and float64), and that whole models with and
// without folding (HPCTRAIN_CPU_FUSE=none) compute the same bits in training
// and evaluation, forward and backward.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "grad_check.h"
#include "nn/fusion.h"
#include "nn/model.h"
#include "nn/spec.h"

namespace hpc {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.count() == b.count() && a.dtype() == b.dtype() && a.channel_block() == b.channel_block() &&
         std::memcmp(a.raw(), b.raw(), a.num_bytes()) == 0;
}

Tensor like(const Tensor& t) { return Tensor(t.shape(), t.dtype()).with_channel_block(t.channel_block()); }

// Sets HPCTRAIN_CPU_FUSE for the scope (the models read it when they are built).
struct FuseOff {
  FuseOff() { setenv("HPCTRAIN_CPU_FUSE", "none", 1); }
  ~FuseOff() { unsetenv("HPCTRAIN_CPU_FUSE"); }
};

std::vector<bool> folded_of(const std::string& spec, const Shape& in) {
  std::vector<std::unique_ptr<nn::Layer>> layers;
  Shape shape = in;
  for (const nn::LayerArgs& args : nn::parse_spec(spec)) {
    layers.push_back(nn::make_layer(args));
    shape = layers.back()->build(shape, DType::F32);
  }
  return nn::fold_relus(layers);
}

TEST(Fusion, ChainFoldsAReluIntoTheLayerThatTakesIt) {
  using V = std::vector<bool>;
  const Shape img{4, 6, 6};
  EXPECT_EQ(folded_of("bn relu conv(4,3,pad=1) relu", img), (V{false, true, false, false}))
      << "conv takes no relu; the last layer is never folded";
  EXPECT_EQ(folded_of("bn relu relu bn", img), (V{false, true, false, false})) << "a relu takes no relu";
  EXPECT_EQ(folded_of("res(bn relu bn) relu gap", img), (V{false, true, false}));
  EXPECT_EQ(folded_of("bn tanh bn gelu bn", img), (V{false, false, false, false, false}));
  EXPECT_EQ(folded_of("flatten linear(5) relu linear(2)", img), (V{false, false, false, false}));
  EXPECT_EQ(nn::fold_relus({}), V{});
}

TEST(Fusion, OnlyTheCpuFolds) {
  EXPECT_TRUE(backend::fuses_relu(Device::CPU));
  EXPECT_FALSE(backend::fuses_relu(Device::CUDA));
  const FuseOff off;
  EXPECT_FALSE(backend::fuses_relu(Device::CPU));
}

// The BatchNorm pieces with relu against the same pieces after a separate relu, bit for bit.
void expect_batchnorm_fuses(const Tensor& x, const Tensor& dy, int64_t c, int64_t s) {
  const DType d = x.dtype();
  const Tensor gamma = test::random_tensor(Shape{c}, d, 3, 0.5, 1.5),
               beta = test::random_tensor(Shape{c}, d, 4);
  const Tensor mean = test::random_tensor(Shape{c}, d, 5, -0.5, 0.5),
               invstd = test::random_tensor(Shape{c}, d, 6, 0.5, 2);
  Tensor stats(Shape{2 * c + 1}, DType::F64);
  backend::batchnorm_stats(x, c, s, stats);

  const Tensor y = like(x), fused_y = like(x), relu_dy = like(x);
  backend::batchnorm_normalize(x, mean, invstd, gamma, beta, false, c, s, y);
  backend::activation_forward(kernels::ActivationKind::Relu, y, y);
  backend::batchnorm_normalize(x, mean, invstd, gamma, beta, true, c, s, fused_y);
  EXPECT_TRUE(same_bits(fused_y, y)) << "normalize";
  backend::activation_backward(kernels::ActivationKind::Relu, y, y, dy, relu_dy);

  for (bool batch_stats : {true, false}) {
    SCOPED_TRACE(batch_stats ? "batch statistics" : "running statistics");
    Tensor sums(Shape{2 * c}, DType::F64), fused_sums(Shape{2 * c}, DType::F64);
    Tensor dgamma(Shape{c}, d), dbeta(Shape{c}, d), fused_dgamma(Shape{c}, d), fused_dbeta(Shape{c}, d);
    for (const Tensor& t : {dgamma, dbeta, fused_dgamma, fused_dbeta}) backend::fill(t, 0.25);
    backend::batchnorm_backward_reduce(x, relu_dy, mean, invstd, Tensor(), Tensor(), false, c, s, sums,
                                       dgamma, dbeta);
    backend::batchnorm_backward_reduce(x, dy, mean, invstd, gamma, beta, true, c, s, fused_sums, fused_dgamma,
                                       fused_dbeta);
    EXPECT_TRUE(same_bits(fused_sums, sums) && same_bits(fused_dgamma, dgamma) &&
                same_bits(fused_dbeta, dbeta))
        << "backward reduce";
    const Tensor dx = like(x), fused_dx = like(x);
    backend::batchnorm_backward_dx(x, relu_dy, mean, invstd, gamma, Tensor(), false,
                                   batch_stats ? stats : Tensor(), batch_stats ? sums : Tensor(), c, s, dx);
    backend::batchnorm_backward_dx(x, dy, mean, invstd, gamma, beta, true, batch_stats ? stats : Tensor(),
                                   batch_stats ? sums : Tensor(), c, s, fused_dx);
    EXPECT_TRUE(same_bits(fused_dx, dx)) << "backward dx";
  }
  // The relu did cut: some outputs are 0, some are not.
  int64_t zeros = 0;
  for (int64_t i = 0; i < y.count(); ++i)
    zeros += (d == DType::F32 ? double(y.data<float>()[i]) : y.data<double>()[i]) == 0;
  EXPECT_GT(zeros, y.count() / 10);
  EXPECT_LT(zeros, y.count() * 9 / 10);
}

TEST(Fusion, BatchNormWithReluIsTheOpThenRelu) {
  for (DType d : {DType::F32, DType::F64})
    for (int64_t s : {1, 7, 49, 1027}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + ", spatial " + std::to_string(s));
      const int64_t n = 3, c = 5;
      expect_batchnorm_fuses(test::random_tensor(Shape{n, c, s}, d, 1, -2, 2),
                             test::random_tensor(Shape{n, c, s}, d, 2), c, s);
    }
  const int64_t block = backend::channel_block(Device::CPU, DType::F32);
  if (block == 0) GTEST_SKIP() << "no channel-blocked layout on this CPU / build: the plain cases ran";
  SCOPED_TRACE("channel-blocked " + std::to_string(block));
  const int64_t n = 2, c = 2 * block, s = 5 * 7;
  // Any bits are a valid blocked tensor of the same shape; what matters is that the two paths agree.
  const Tensor x = test::random_tensor(Shape{n, c, 5, 7}, DType::F32, 1, -2, 2).with_channel_block(block);
  const Tensor dy = test::random_tensor(Shape{n, c, 5, 7}, DType::F32, 2).with_channel_block(block);
  expect_batchnorm_fuses(x, dy, c, s);
}

TEST(Fusion, AddReluIsAddThenRelu) {
  for (DType d : {DType::F32, DType::F64}) {
    const Tensor a = test::random_tensor(Shape{4, 3, 9}, d, 7), b = test::random_tensor(Shape{4, 3, 9}, d, 8);
    const Tensor ref = like(a), out = like(a);
    backend::elementwise_add(a, b, ref);
    backend::activation_forward(kernels::ActivationKind::Relu, ref, ref);
    backend::add_relu(a, b, out);
    EXPECT_TRUE(same_bits(out, ref)) << dtype_name(d);
  }
}

// Two training steps' outputs and parameter gradients, then the evaluation
// output, of `spec` built with and without folding: the same bits.
void expect_model_fuses(const std::string& spec, const Shape& in, DType d) {
  SCOPED_TRACE(spec + " in " + dtype_name(d));
  auto run = [&](bool fuse) {
    std::unique_ptr<FuseOff> off = fuse ? nullptr : std::make_unique<FuseOff>();
    nn::Model m(spec, in, d, 21);
    const Tensor x = test::random_tensor(in.with_batch(5), d, 22);
    std::vector<Tensor> out;
    nn::RunCtx train;
    for (int step = 0; step < 2; ++step) {  // the second step reuses every buffer
      const Tensor& y = m.forward(x, train);
      out.emplace_back(y.shape(), d);
      backend::copy(y, out.back());
      m.zero_grads();
      m.backward(test::random_tensor(y.shape(), d, 23 + step), train);
      out.emplace_back(m.grads().shape(), d);
      backend::copy(m.grads(), out.back());
      backend::axpy(-0.1, m.grads(), m.params());
    }
    nn::RunCtx eval;
    eval.training = false;
    const Tensor& y = m.forward(x, eval);
    out.emplace_back(y.shape(), d);
    backend::copy(y, out.back());
    return std::make_pair(out, m.activation_bytes(5).kept);
  };
  const auto [fused, fused_bytes] = run(true);
  const auto [plain, plain_bytes] = run(false);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bits(fused[i], plain[i])) << "output " << i;
  EXPECT_LT(fused_bytes, plain_bytes) << "folded relus hold no output or gradient of their own";
}

TEST(Fusion, ModelsAreBitForBitTheUnfusedOnes) {
  const std::string resnet =
      "conv(16,3,pad=1,bias=0) bn relu res(conv(16,3,pad=1,bias=0) bn relu conv(16,3,pad=1,bias=0) bn) relu "
      "res(conv(32,3,stride=2,pad=1,bias=0) bn relu conv(32,3,pad=1,bias=0) bn) relu gap linear(10)";
  expect_model_fuses(resnet, Shape{3, 12, 12}, DType::F32);  // blocked where the CPU has a block
  expect_model_fuses(resnet, Shape{3, 12, 12}, DType::F64);  // plain, the lowering
  // A res block ending in a folded pair inside, nested, and flat BatchNorm1d.
  expect_model_fuses(
      "res(bn relu res(bn relu conv(3,3,pad=1)) relu bn) relu flatten linear(6) bn relu linear(2)",
      Shape{3, 5, 5}, DType::F64);
}

}  // namespace
}  // namespace hpc
