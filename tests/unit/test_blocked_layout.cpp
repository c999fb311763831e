// Channel-blocked activations (core/tensor.h, nn/layout.h): which
// activations a chain keeps blocked, and that every op that takes a blocked
// tensor computes what it computes on the plain one: the convolutions in
// every blocked combination, BatchNorm's four pieces, global average
// pooling (bit for bit), and a whole residual model in float32 (oneDNN,
// blocked) against the same model in float64 (lowering, plain).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/cpu/onednn.h"
#include "backend/ops.h"
#include "core/error.h"
#include "grad_check.h"
#include "nn/layout.h"
#include "nn/model.h"
#include "nn/spec.h"

namespace hpc {
namespace {

// A plain [N, C, H, W] float32 tensor copied into the blocked order.
Tensor to_blocked(const Tensor& plain, int64_t block) {
  const int64_t n = plain.shape()[0], c = plain.shape()[1], s = plain.shape()[2] * plain.shape()[3];
  Tensor out = Tensor(plain.shape(), DType::F32).with_channel_block(block);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k)
        out.data<float>()[((i * (c / block) + ch / block) * s + k) * block + ch % block] =
            plain.data<float>()[(i * c + ch) * s + k];
  return out;
}

Tensor to_plain(const Tensor& blocked) {
  const int64_t block = blocked.channel_block();
  const int64_t n = blocked.shape()[0], c = blocked.shape()[1], s = blocked.shape()[2] * blocked.shape()[3];
  Tensor out(blocked.shape(), DType::F32);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k)
        out.data<float>()[(i * c + ch) * s + k] =
            blocked.data<float>()[((i * (c / block) + ch / block) * s + k) * block + ch % block];
  return out;
}

Tensor layout(const Tensor& plain, int64_t block) { return block ? to_blocked(plain, block) : plain; }
Tensor plain_of(const Tensor& t) { return t.channel_block() ? to_plain(t) : t; }

double worst_relative(const Tensor& a, const Tensor& b, double tol) {
  double worst = 0;
  for (int64_t i = 0; i < a.count(); ++i) {
    const double x = a.dtype() == DType::F32 ? a.data<float>()[i] : a.data<double>()[i];
    const double y = b.dtype() == DType::F32 ? b.data<float>()[i] : b.data<double>()[i];
    worst = std::max(worst, std::fabs(x - y) / (tol * (1 + std::fabs(y))));
  }
  return worst;
}

std::vector<int64_t> blocks_of(const std::string& spec, const Shape& in, int64_t block) {
  std::vector<std::unique_ptr<nn::Layer>> layers;
  Shape shape = in;
  for (const nn::LayerArgs& a : nn::parse_spec(spec)) {
    layers.push_back(nn::make_layer(a));
    shape = layers.back()->build(shape, DType::F32);
  }
  return nn::chain_blocks(layers, 0, block, false);
}

using Blocks = std::vector<int64_t>;

TEST(BlockedLayout, ChainKeepsTheBlockOnlyBetweenLayersThatTakeIt) {
  const Shape cifar{3, 32, 32};
  // conv (no bias) → bn → relu → res → relu → gap: blocked from the stem's output to gap's input.
  EXPECT_EQ(blocks_of("conv(16,3,pad=1,bias=0) bn relu res(conv(16,3,pad=1,bias=0) bn relu "
                      "conv(16,3,pad=1,bias=0) bn) relu gap linear(10)",
                      cifar, 16),
            (Blocks{0, 16, 16, 16, 16, 16, 0, 0}));
  // A projection shortcut (1x1 conv + bn) keeps the block too.
  EXPECT_EQ(blocks_of("conv(16,3,pad=1,bias=0) res(conv(32,3,stride=2,pad=1,bias=0) bn) relu gap", cifar, 16),
            (Blocks{0, 16, 16, 16, 0}));
  // Pooling and flatten need NCHW, and so does a conv with a bias: nothing is blocked.
  EXPECT_EQ(blocks_of("conv(32,3,pad=1,bias=0) bn relu maxpool(2) flatten linear(10)", cifar, 16),
            (Blocks{0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(blocks_of("conv(32,3,pad=1) bn relu gap", cifar, 16), (Blocks{0, 0, 0, 0, 0}));
  // Channels that are no multiple of the block stay plain (24 % 16), as does everything with block 0.
  EXPECT_EQ(blocks_of("conv(24,3,pad=1,bias=0) bn relu gap", cifar, 16), (Blocks{0, 0, 0, 0, 0}));
  EXPECT_EQ(blocks_of("conv(24,3,pad=1,bias=0) bn relu gap", cifar, 8), (Blocks{0, 8, 8, 8, 0}));
  EXPECT_EQ(blocks_of("conv(16,3,pad=1,bias=0) bn relu gap", cifar, 0), (Blocks{0, 0, 0, 0, 0}));
  // A residual block whose input is plain leaves it plain (the identity add sees one layout), while
  // the convolutions inside it still hand blocked tensors to each other.
  EXPECT_EQ(blocks_of("res(conv(3,3,pad=1,bias=0) bn) relu gap", cifar, 16), (Blocks{0, 0, 0, 0}));
  // The model's output is plain: a blocked chain's last layer gives plain.
  EXPECT_EQ(blocks_of("conv(16,3,pad=1,bias=0) bn", cifar, 16), (Blocks{0, 0, 0}));
}

class BlockedOps : public ::testing::Test {
 protected:
  void SetUp() override {
    block_ = backend::channel_block(Device::CPU, DType::F32);
    if (block_ == 0) GTEST_SKIP() << "no channel-blocked layout here: " << backend::cpu::onednn::describe();
  }
  int64_t block_ = 0;
};

TEST_F(BlockedOps, ConvolutionsInEveryLayoutAgreeWithPlain) {
  struct Case {
    int64_t c, h, oc, k, stride, pad;
  };
  for (const Case& c : {Case{3, 32, 16, 3, 1, 1}, Case{16, 32, 16, 3, 1, 1}, Case{16, 32, 32, 3, 2, 1},
                        Case{32, 16, 64, 1, 2, 0}}) {
    const kernels::ConvShape g = kernels::ConvShape::make(1, c.c, c.h, c.h, c.k, c.stride, c.pad);
    const Tensor x = test::random_tensor(Shape{2, c.c, c.h, c.h}, DType::F32, 1);
    const Tensor w = test::random_tensor(Shape{c.oc, c.c, c.k, c.k}, DType::F32, 2);
    const Tensor dy = test::random_tensor(Shape{2, c.oc, g.out_h, g.out_w}, DType::F32, 3);
    Tensor y_ref(dy.shape(), DType::F32), dw_ref(w.shape(), DType::F32), dx_ref(x.shape(), DType::F32);
    backend::fill(dw_ref, 0.0);
    backend::conv2d_forward(x, w, g, y_ref);
    backend::conv2d_backward(x, w, dy, g, dw_ref, dx_ref);
    for (int64_t in_block : {int64_t{0}, block_})
      for (int64_t out_block : {int64_t{0}, block_}) {
        if (in_block && c.c % in_block) continue;
        const std::string what = std::to_string(c.c) + "->" + std::to_string(c.oc) + " k" +
                                 std::to_string(c.k) + " in block " + std::to_string(in_block) +
                                 " out block " + std::to_string(out_block);
        const Tensor xb = layout(x, in_block), dyb = layout(dy, out_block);
        const Tensor y = Tensor(dy.shape(), DType::F32).with_channel_block(out_block);
        const Tensor dx = Tensor(x.shape(), DType::F32).with_channel_block(in_block);
        Tensor dw(w.shape(), DType::F32);
        backend::fill(dw, 0.0);
        ASSERT_TRUE(backend::conv2d_supported(xb, w, y, g));
        backend::conv2d_forward(xb, w, g, y);
        backend::conv2d_backward(xb, w, dyb, g, dw, dx);
        EXPECT_LE(worst_relative(plain_of(y), y_ref, 1e-5), 1.0) << what << ": forward";
        EXPECT_LE(worst_relative(dw, dw_ref, 1e-5), 1.0) << what << ": weights";
        EXPECT_LE(worst_relative(plain_of(dx), dx_ref, 1e-5), 1.0) << what << ": data";
      }
  }
}

TEST_F(BlockedOps, BatchNormPiecesAgreeWithPlain) {
  const int64_t n = 3, c = 2 * block_, h = 5, w = 7, s = h * w;
  const Tensor x = test::random_tensor(Shape{n, c, h, w}, DType::F32, 4, -2, 3);
  const Tensor dy = test::random_tensor(Shape{n, c, h, w}, DType::F32, 5);
  const Tensor gamma = test::random_tensor(Shape{c}, DType::F32, 6, 0.5, 1.5);
  const Tensor beta = test::random_tensor(Shape{c}, DType::F32, 7);
  struct Out {
    Tensor stats, mean, invstd, y, grad_sums, dgamma, dbeta, dx;
  };
  auto run = [&](int64_t block, bool relu) {
    Out o{Tensor(Shape{2 * c + 1}, DType::F64), Tensor(Shape{c}, DType::F32),
          Tensor(Shape{c}, DType::F32),         Tensor(x.shape(), DType::F32).with_channel_block(block),
          Tensor(Shape{2 * c}, DType::F64),     Tensor(Shape{c}, DType::F32),
          Tensor(Shape{c}, DType::F32),         Tensor(x.shape(), DType::F32).with_channel_block(block)};
    const Tensor xb = layout(x, block), dyb = layout(dy, block);
    backend::batchnorm_stats(xb, c, s, o.stats);
    backend::batchnorm_finalize(o.stats, c, 1e-5, 0.1, o.mean, o.invstd, Tensor(), Tensor());
    backend::batchnorm_normalize(xb, o.mean, o.invstd, gamma, beta, relu, c, s, o.y);
    backend::batchnorm_backward_reduce(xb, dyb, o.mean, o.invstd, gamma, beta, relu, c, s, o.grad_sums,
                                       o.dgamma, o.dbeta);
    backend::batchnorm_backward_dx(xb, dyb, o.mean, o.invstd, gamma, beta, relu, o.stats, o.grad_sums, c, s,
                                   o.dx);
    o.y = plain_of(o.y);
    o.dx = plain_of(o.dx);
    return o;
  };
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "with relu" : "without relu");
    const Out plain = run(0, relu), blocked = run(block_, relu);
    EXPECT_LE(worst_relative(blocked.stats, plain.stats, 1e-12), 1.0);
    EXPECT_LE(worst_relative(blocked.mean, plain.mean, 1e-6), 1.0);
    EXPECT_LE(worst_relative(blocked.invstd, plain.invstd, 1e-6), 1.0);
    EXPECT_LE(worst_relative(blocked.y, plain.y, 1e-5), 1.0);
    EXPECT_LE(worst_relative(blocked.grad_sums, plain.grad_sums, 1e-6), 1.0);
    EXPECT_LE(worst_relative(blocked.dgamma, plain.dgamma, 1e-5), 1.0);
    EXPECT_LE(worst_relative(blocked.dbeta, plain.dbeta, 1e-5), 1.0);
    EXPECT_LE(worst_relative(blocked.dx, plain.dx, 1e-5), 1.0);
    // The blocked loops give the generic table's bits whichever table runs (one binary, every node alike).
    const Out fallback = [&] {
      const backend::cpu::UseKernels generic(backend::cpu::generic_f32_table());
      return run(block_, relu);
    }();
    auto same = [](const Tensor& a, const Tensor& b) {
      return std::memcmp(a.raw(), b.raw(), a.num_bytes()) == 0;
    };
    EXPECT_TRUE(same(fallback.stats, blocked.stats) && same(fallback.y, blocked.y) &&
                same(fallback.grad_sums, blocked.grad_sums) && same(fallback.dx, blocked.dx));
  }
  // Evaluation mode (running statistics: no grad_sums): dx = gamma·invstd·dy in both layouts.
  Tensor dx_eval_plain(x.shape(), DType::F32),
      dx_eval = Tensor(x.shape(), DType::F32).with_channel_block(block_);
  const Out plain = run(0, false);
  backend::batchnorm_backward_dx(x, dy, plain.mean, plain.invstd, gamma, Tensor(), false, Tensor(), Tensor(),
                                 c, s, dx_eval_plain);
  backend::batchnorm_backward_dx(to_blocked(x, block_), to_blocked(dy, block_), plain.mean, plain.invstd,
                                 gamma, Tensor(), false, Tensor(), Tensor(), c, s, dx_eval);
  EXPECT_LE(worst_relative(to_plain(dx_eval), dx_eval_plain, 1e-6), 1.0);
}

TEST_F(BlockedOps, GlobalAveragePoolingIsBitForBitThePlainOne) {
  const int64_t n = 2, c = 3 * block_, s = 6 * 6;
  const Tensor x = test::random_tensor(Shape{n, c, 6, 6}, DType::F32, 8);
  Tensor y(Shape{n, c}, DType::F32), y_blocked(Shape{n, c}, DType::F32);
  backend::spatial_mean_forward(x, s, y);
  backend::spatial_mean_forward(to_blocked(x, block_), s, y_blocked);
  EXPECT_EQ(std::memcmp(y.raw(), y_blocked.raw(), y.num_bytes()), 0);
  const Tensor dy = test::random_tensor(Shape{n, c}, DType::F32, 9);
  Tensor dx(x.shape(), DType::F32), dx_blocked = Tensor(x.shape(), DType::F32).with_channel_block(block_);
  backend::spatial_mean_backward(dy, s, dx);
  backend::spatial_mean_backward(dy, s, dx_blocked);
  const Tensor back = to_plain(dx_blocked);
  EXPECT_EQ(std::memcmp(dx.raw(), back.raw(), dx.num_bytes()), 0);
}

TEST_F(BlockedOps, OpsRefuseMixedLayouts) {
  const Tensor a = test::random_tensor(Shape{1, block_, 2, 2}, DType::F32, 1);
  const Tensor b = to_blocked(a, block_);
  Tensor out(a.shape(), DType::F32);
  EXPECT_THROW(backend::elementwise_add(a, b, out), Error);
  EXPECT_THROW(backend::copy(b, out), Error);
}

// A residual network in float32 (oneDNN, blocked between the convolutions)
// against itself in float64 (the lowering, plain): same initial weights,
// same input; logits and every parameter gradient agree to float rounding.
TEST_F(BlockedOps, ResidualModelMatchesItsFloat64Self) {
  const std::string spec =
      "conv(16,3,pad=1,bias=0) bn relu res(conv(16,3,pad=1,bias=0) bn relu conv(16,3,pad=1,bias=0) bn) relu "
      "res(conv(32,3,stride=2,pad=1,bias=0) bn relu conv(32,3,pad=1,bias=0) bn) relu gap linear(10)";
  const Shape in{3, 12, 12};
  nn::Model m32(spec, in, DType::F32, 11), m64(spec, in, DType::F64, 11);
  EXPECT_EQ(m32.output_block(0), block_);  // the stem's output
  EXPECT_EQ(m32.output_block(5), block_);  // the second residual block's output
  EXPECT_EQ(m32.output_block(7), 0);       // gap's
  EXPECT_EQ(m64.output_block(0), 0);       // float64 stays plain
  const Tensor x64 = test::random_tensor(in.with_batch(4), DType::F64, 12);
  Tensor x32(x64.shape(), DType::F32);
  backend::convert(x64, x32);
  Tensor p32(m32.params().shape(), DType::F32);
  backend::convert(m64.params(), p32);
  backend::copy(p32, m32.params());  // the float64 weights, rounded
  backend::convert(m32.params(), m64.params());
  nn::RunCtx ctx;
  const Tensor& y32 = m32.forward(x32, ctx);
  const Tensor& y64 = m64.forward(x64, ctx);
  EXPECT_LE(worst_relative(y32, y64, 1e-4), 1.0) << "logits";
  const Tensor dout64 = test::random_tensor(y64.shape(), DType::F64, 13);
  Tensor dout32(dout64.shape(), DType::F32);
  backend::convert(dout64, dout32);
  m32.zero_grads();
  m64.zero_grads();
  m32.backward(dout32, ctx);
  m64.backward(dout64, ctx);
  for (const nn::ParamInfo& p : m32.param_info()) {
    const Tensor g32 = m32.grads().slice(p.offset, p.shape), g64 = m64.grads().slice(p.offset, p.shape);
    double scale = 0;  // gradients are compared against the tensor's largest, not element by element
    for (int64_t i = 0; i < g64.count(); ++i) scale = std::max(scale, std::fabs(g64.data<double>()[i]));
    double worst = 0;
    for (int64_t i = 0; i < g64.count(); ++i)
      worst =
          std::max(worst, std::fabs(g32.data<float>()[i] - g64.data<double>()[i]) / (1e-3 * scale + 1e-6));
    EXPECT_LE(worst, 1.0) << p.name;
  }
}

}  // namespace
}  // namespace hpc
