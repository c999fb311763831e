// The AVX-512 bodies of the CPU backend's per-element loops (cpu/simd.h)
// give bitwise the results of the default (AVX2) bodies: BatchNorm's sums,
// normalisation and input gradient, the Adam/AdamW update, the bias add and
// its gradient's sums, on row lengths with and without a tail, GELU forward
// and backward (exp16 against exp8), and the attention's register-tiled
// products (12×32 tiles against 6×16) on every causal pattern. Skipped
// (visibly) on a CPU without AVX-512.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "backend/cpu/simd.h"
#include "backend/ops.h"
#include "grad_check.h"

namespace hpc {
namespace {

namespace simd = backend::cpu::simd;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.count() == b.count() && std::memcmp(a.raw(), b.raw(), a.num_bytes()) == 0;
}

Tensor clone(const Tensor& t) {
  Tensor c(t.shape(), t.dtype());
  backend::copy(t, c);
  return c;
}

// Runs `fn` on fresh copies of `inputs` with the default bodies and with the AVX-512 ones; returns both.
std::pair<std::vector<Tensor>, std::vector<Tensor>> both(
    const std::vector<Tensor>& inputs, const std::function<void(std::vector<Tensor>&)>& fn) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) a.push_back(clone(t)), b.push_back(clone(t));
  simd::force_default(true);
  fn(a);
  simd::force_default(false);
  fn(b);
  return {a, b};
}

class CpuSimd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!simd::avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (or HPCTRAIN_CPU_ISA=avx2)";
  }
};

TEST_F(CpuSimd, BatchNormIsBitwiseTheDefault) {
  for (bool relu : {false, true})
    for (int64_t spatial : {1, 7, 49, 64, 1027}) {
      const int64_t n = 5, c = 6;
      const Shape s{n, c, spatial};
      const Tensor x = test::random_tensor(s, DType::F32, 1, -3, 5),
                   dy = test::random_tensor(s, DType::F32, 2);
      // In each row +2^40 at position 0 and −2^40 at 24: the terms between them are rounded
      // into the large partial sum, so another order of additions would change the sums' bits.
      if (spatial > 24)
        for (int64_t r = 0; r < n * c; ++r)
          for (const Tensor* t : {&x, &dy}) {
            float* row = t->data<float>() + r * spatial;
            row[0] = 0x1p40f;
            row[24] = -0x1p40f;
          }
      const Tensor gamma = test::random_tensor(Shape{c}, DType::F32, 3),
                   beta = test::random_tensor(Shape{c}, DType::F32, 4);
      const Tensor mean = test::random_tensor(Shape{c}, DType::F32, 5),
                   invstd = test::random_tensor(Shape{c}, DType::F32, 6, 0.5, 2);
      auto [d, v] = both(
          {Tensor(Shape{2 * c + 1}, DType::F64), Tensor(s, DType::F32), Tensor(Shape{2 * c}, DType::F64),
           Tensor(Shape{c}, DType::F32, Device::CPU), Tensor(Shape{c}, DType::F32), Tensor(s, DType::F32)},
          [&](std::vector<Tensor>& o) {
            backend::fill(o[3], 0.0);
            backend::fill(o[4], 0.0);
            backend::batchnorm_stats(x, c, spatial, o[0]);
            backend::batchnorm_normalize(x, mean, invstd, gamma, beta, relu, c, spatial, o[1]);
            backend::batchnorm_backward_reduce(x, dy, mean, invstd, gamma, beta, relu, c, spatial, o[2], o[3],
                                               o[4]);
            backend::batchnorm_backward_dx(x, dy, mean, invstd, gamma, beta, relu, o[0], o[2], c, spatial,
                                           o[5]);
          });
      const char* names[] = {"stats", "normalize", "grad sums", "dgamma", "dbeta", "dx"};
      for (size_t i = 0; i < d.size(); ++i)
        EXPECT_TRUE(same_bits(d[i], v[i])) << names[i] << ", spatial " << spatial << (relu ? ", relu" : "");
    }
}

TEST_F(CpuSimd, AdamIsBitwiseTheDefault) {
  for (backend::OptimRule rule : {backend::OptimRule::ADAM, backend::OptimRule::ADAMW}) {
    const int64_t count = 1000 + 13;
    backend::OptimHyper h;
    h.rule = rule;
    h.lr = 1e-3;
    h.weight_decay = 0.01;
    const Tensor p = test::random_tensor(Shape{count}, DType::F32, 7),
                 g = test::random_tensor(Shape{count}, DType::F32, 8);
    const Tensor m = test::random_tensor(Shape{count}, DType::F32, 9, -0.1, 0.1);
    const Tensor v = test::random_tensor(Shape{count}, DType::F32, 10, 0, 0.01);
    auto [d, w] = both({p, m, v}, [&](std::vector<Tensor>& o) {
      for (int64_t step = 1; step <= 3; ++step) {
        h.step = step;
        backend::optim_update(h, true, o[0], g, o[1], o[2], 0, count);
      }
    });
    for (size_t i = 0; i < d.size(); ++i) EXPECT_TRUE(same_bits(d[i], w[i])) << "tensor " << i;
    EXPECT_FALSE(same_bits(d[0], p));  // the update ran
  }
}

TEST_F(CpuSimd, GeluIsBitwiseTheDefault) {
  for (int64_t n : {1, 8, 15, 16, 17, 1000 + 13}) {
    Tensor x = test::random_tensor(Shape{n}, DType::F32, 3, -12, 12);
    const float special[] = {0.0f,
                             -0.0f,
                             90.0f,
                             -90.0f,
                             1e-30f,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
    for (int64_t i = 0; i < n && i < 8; ++i) x.data<float>()[i * 7 % n] = special[i];
    const Tensor dy = test::random_tensor(Shape{n}, DType::F32, 4);
    auto [d, v] =
        both({Tensor(Shape{n}, DType::F32), Tensor(Shape{n}, DType::F32)}, [&](std::vector<Tensor>& o) {
          backend::activation_forward(kernels::ActivationKind::Gelu, x, o[0]);
          backend::activation_backward(kernels::ActivationKind::Gelu, x, o[0], dy, o[1]);
        });
    EXPECT_TRUE(same_bits(d[0], v[0])) << "forward, n " << n;
    EXPECT_TRUE(same_bits(d[1], v[1])) << "backward, n " << n;
  }
}

TEST_F(CpuSimd, BiasIsBitwiseTheDefault) {
  for (int64_t spatial : {1, 7, 49})
    for (int64_t channels : {1, 7, 16, 17, 1024 + 5}) {
      const int64_t rows = 33;
      const Shape s{rows, channels, spatial};
      // Rows 0 and 1 hold exact opposites near 2^40, the other rows values below 1: summed in
      // another order than rows 0, 1, 2, … the small ones would be lost in the large partial sum.
      const Tensor dy = test::random_tensor(s, DType::F32, 5);
      float* g = dy.data<float>();
      for (int64_t i = 0; i < channels * spatial; ++i) {
        g[i] = 0x1p40f * (2 + g[i]);
        g[channels * spatial + i] = -g[i];
      }
      const Tensor bias = test::random_tensor(Shape{channels}, DType::F32, 6);
      auto [d, v] =
          both({test::random_tensor(s, DType::F32, 7), test::random_tensor(Shape{channels}, DType::F32, 8)},
               [&](std::vector<Tensor>& o) {
                 backend::add_bias(o[0], bias, channels, spatial);
                 backend::bias_grad(dy, o[1], channels, spatial);
               });
      EXPECT_TRUE(same_bits(d[0], v[0])) << "add_bias, channels " << channels << ", spatial " << spatial;
      EXPECT_TRUE(same_bits(d[1], v[1])) << "bias_grad, channels " << channels << ", spatial " << spatial;
    }
}

TEST_F(CpuSimd, AttentionIsBitwiseTheDefault) {
  for (int64_t t : {1, 37, 128}) {
    const int64_t b = 2, heads = 2, d = 24, c = heads * d;
    const Tensor qkv = test::random_tensor(Shape{b, t, 3 * c}, DType::F32, 1, -2, 2);
    const Tensor dout = test::random_tensor(Shape{b, t, c}, DType::F32, 2);
    auto [d0, v0] = both(
        {Tensor(Shape{b, heads, t, t}, DType::F32), Tensor(Shape{b, t, c}, DType::F32),
         Tensor(qkv.shape(), DType::F32)},
        [&](std::vector<Tensor>& o) {
          backend::attention_forward(qkv, heads, heads, o[0], o[1]);
          backend::attention_backward(qkv, o[0], dout, heads, heads, o[2], Tensor(Shape{t, t}, DType::F32));
        });
    const char* names[] = {"probabilities", "output", "dqkv"};
    for (size_t i = 0; i < d0.size(); ++i) EXPECT_TRUE(same_bits(d0[i], v0[i])) << names[i] << ", T " << t;
  }
}

}  // namespace
}  // namespace hpc
