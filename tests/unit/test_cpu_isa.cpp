// Every float32 kernel table this build has and this CPU runs (avx2, avx512;
// backend/cpu/isa/kernel_table.h) gives bitwise the generic table's results,
// through the ops: BatchNorm's sums, normalisation and input gradient (plain
// rows and both channel blocks, with and without a fused relu), the Adam/AdamW
// update, the bias add and its gradient's sums, on row lengths with and
// without a tail, GELU forward and backward, the softmax cross-entropy rows,
// and attention (softmax, register-tiled products on every causal pattern,
// transposes). Every table fills every slot. Skipped (visibly) where generic
// is the only table (a build without AVX2 + FMA).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/ops.h"
#include "grad_check.h"

namespace hpc {
namespace {

using backend::cpu::KernelTable;
using backend::cpu::UseKernels;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.count() == b.count() && std::memcmp(a.raw(), b.raw(), a.num_bytes()) == 0;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor(t.shape(), t.dtype()).with_channel_block(t.channel_block());
  backend::copy(t, c);
  return c;
}

// The tables to hold to generic: every runnable one but generic itself.
std::vector<const KernelTable<float>*> vector_tables() {
  std::vector<const KernelTable<float>*> all = backend::cpu::runnable_tables();
  return {all.begin() + 1, all.end()};
}

// Runs `fn` on fresh copies of `inputs` with the generic table and with `table`; returns both.
std::pair<std::vector<Tensor>, std::vector<Tensor>> both(
    const KernelTable<float>& table, const std::vector<Tensor>& inputs,
    const std::function<void(std::vector<Tensor>&)>& fn) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) a.push_back(clone(t)), b.push_back(clone(t));
  {
    const UseKernels generic(backend::cpu::generic_f32_table());
    fn(a);
  }
  const UseKernels use(table);
  fn(b);
  return {a, b};
}

class CpuIsa : public ::testing::Test {
 protected:
  void SetUp() override {
    if (vector_tables().empty()) GTEST_SKIP() << "generic is this build's only kernel table (no AVX2 + FMA)";
  }
};

// A table is its name and then function pointers only: read as words, none may be null
// (a slot a table's initializer left out).
TEST(CpuIsaTables, EveryTableFillsEverySlot) {
  constexpr size_t WORDS = sizeof(KernelTable<float>) / sizeof(void*);
  static_assert(sizeof(KernelTable<float>) == WORDS * sizeof(void*), "a KernelTable holds pointers only");
  std::vector<const KernelTable<float>*> tables = backend::cpu::runnable_tables();
  EXPECT_STREQ(tables.front()->isa, "generic");
  for (const KernelTable<float>* t : tables) {
    std::array<const void*, WORDS> words{};
    std::memcpy(words.data(), t, sizeof *t);
    for (size_t i = 1; i < WORDS; ++i) EXPECT_NE(words[i], nullptr) << t->isa << ": slot " << i;
  }
  constexpr size_t WORDS64 = sizeof(KernelTable<double>) / sizeof(void*);
  std::array<const void*, WORDS64> words{};
  std::memcpy(words.data(), &backend::cpu::kernel_table<double>(), sizeof(KernelTable<double>));
  for (size_t i = 1; i < WORDS64; ++i) EXPECT_NE(words[i], nullptr) << "float64: slot " << i;
}

TEST_F(CpuIsa, BatchNormIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
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
            *table,
            {Tensor(Shape{2 * c + 1}, DType::F64), Tensor(s, DType::F32), Tensor(Shape{2 * c}, DType::F64),
             Tensor(Shape{c}, DType::F32, Device::CPU), Tensor(Shape{c}, DType::F32), Tensor(s, DType::F32)},
            [&](std::vector<Tensor>& o) {
              backend::fill(o[3], 0.0);
              backend::fill(o[4], 0.0);
              backend::batchnorm_stats(x, c, spatial, o[0]);
              backend::batchnorm_normalize(x, mean, invstd, gamma, beta, relu, c, spatial, o[1]);
              backend::batchnorm_backward_reduce(x, dy, mean, invstd, gamma, beta, relu, c, spatial, o[2],
                                                 o[3], o[4]);
              backend::batchnorm_backward_dx(x, dy, mean, invstd, gamma, beta, relu, o[0], o[2], c, spatial,
                                             o[5]);
            });
        const char* names[] = {"stats", "normalize", "grad sums", "dgamma", "dbeta", "dx"};
        for (size_t i = 0; i < d.size(); ++i)
          EXPECT_TRUE(same_bits(d[i], v[i])) << names[i] << ", spatial " << spatial << (relu ? ", relu" : "");
      }
  }
}

TEST_F(CpuIsa, AdamIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
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
      auto [d, w] = both(*table, {p, m, v}, [&](std::vector<Tensor>& o) {
        for (int64_t step = 1; step <= 3; ++step) {
          h.step = step;
          backend::optim_update(h, true, o[0], g, o[1], o[2], 0, count);
        }
      });
      for (size_t i = 0; i < d.size(); ++i) EXPECT_TRUE(same_bits(d[i], w[i])) << "tensor " << i;
      EXPECT_FALSE(same_bits(d[0], p));  // the update ran
    }
  }
}

TEST_F(CpuIsa, GeluIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
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
      auto [d, v] = both(*table, {Tensor(Shape{n}, DType::F32), Tensor(Shape{n}, DType::F32)},
                         [&](std::vector<Tensor>& o) {
                           backend::activation_forward(kernels::ActivationKind::Gelu, x, o[0]);
                           backend::activation_backward(kernels::ActivationKind::Gelu, x, o[0], dy, o[1]);
                         });
      EXPECT_TRUE(same_bits(d[0], v[0])) << "forward, n " << n;
      EXPECT_TRUE(same_bits(d[1], v[1])) << "backward, n " << n;
    }
  }
}

TEST_F(CpuIsa, BiasIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
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
            both(*table,
                 {test::random_tensor(s, DType::F32, 7), test::random_tensor(Shape{channels}, DType::F32, 8)},
                 [&](std::vector<Tensor>& o) {
                   backend::add_bias(o[0], bias, channels, spatial);
                   backend::bias_grad(dy, o[1], channels, spatial);
                 });
        EXPECT_TRUE(same_bits(d[0], v[0])) << "add_bias, channels " << channels << ", spatial " << spatial;
        EXPECT_TRUE(same_bits(d[1], v[1])) << "bias_grad, channels " << channels << ", spatial " << spatial;
      }
  }
}

TEST_F(CpuIsa, CrossEntropyIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
    for (int64_t k : {1, 7, 8, 10, 257}) {  // one partial vector, whole ones, and both
      const int64_t n = 6;
      const Tensor logits = test::random_tensor(Shape{n, k}, DType::F32, 11, -30, 30);
      Tensor labels(Shape{n}, DType::I32);
      for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = int32_t((i * 5) % k);
      std::vector<double> losses;  // generic's, then the table's
      auto [d, v] = both(*table, {Tensor(logits.shape(), DType::F32)}, [&](std::vector<Tensor>& o) {
        losses.push_back(
            backend::softmax_cross_entropy(logits, labels, n - 1, 0.1, 0.25, true, o[0]).loss_sum);
      });
      EXPECT_TRUE(same_bits(d[0], v[0])) << "dlogits, k " << k;
      EXPECT_EQ(std::bit_cast<uint64_t>(losses[0]), std::bit_cast<uint64_t>(losses[1])) << "loss, k " << k;
    }
  }
}

// One exp of 1 and the others just below half its ulp in double (e^-37 < 2^-53): added in
// another order than the lanes' (lane 0 first), they would round the total up, and the loss of
// a row whose label is the largest logit, without smoothing, is log of that total.
TEST_F(CpuIsa, CrossEntropyAddsTheLanesInOrder) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
    for (int64_t k : {8, 10}) {
      Tensor logits(Shape{1, k}, DType::F32), labels(Shape{1}, DType::I32), dz(Shape{1, k}, DType::F32);
      for (int64_t j = 0; j < k; ++j) logits.data<float>()[j] = j == 0 ? 0.0f : -37.0f;
      labels.data<int32_t>()[0] = 0;
      double loss[2];
      for (int run = 0; run < 2; ++run) {
        const UseKernels use(run == 0 ? backend::cpu::generic_f32_table() : *table);
        loss[run] = backend::softmax_cross_entropy(logits, labels, 1, 0.0, 1.0, false, dz).loss_sum;
      }
      EXPECT_EQ(std::bit_cast<uint64_t>(loss[0]), std::bit_cast<uint64_t>(loss[1]))
          << loss[0] << " vs " << loss[1] << ", k " << k;
    }
  }
}

TEST_F(CpuIsa, BlockedBatchNormIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
    for (int block : {8, 16})
      for (bool relu : {false, true}) {
        const int64_t n = 3, c = 32, spatial = 13;
        // [N, C/B, S, B] holds as many floats as [N, C, S, 1]: random values either way.
        const Tensor x =
            test::random_tensor(Shape{n, c, spatial, 1}, DType::F32, 1, -3, 5).with_channel_block(block);
        const Tensor dy =
            test::random_tensor(Shape{n, c, spatial, 1}, DType::F32, 2).with_channel_block(block);
        const Tensor gamma = test::random_tensor(Shape{c}, DType::F32, 3),
                     beta = test::random_tensor(Shape{c}, DType::F32, 4);
        const Tensor mean = test::random_tensor(Shape{c}, DType::F32, 5),
                     invstd = test::random_tensor(Shape{c}, DType::F32, 6, 0.5, 2);
        const Shape s = x.shape();
        auto [d, v] =
            both(*table,
                 {Tensor(Shape{2 * c + 1}, DType::F64), Tensor(s, DType::F32).with_channel_block(block),
                  Tensor(Shape{2 * c}, DType::F64), Tensor(Shape{c}, DType::F32),
                  Tensor(Shape{c}, DType::F32), Tensor(s, DType::F32).with_channel_block(block)},
                 [&](std::vector<Tensor>& o) {
                   backend::fill(o[3], 0.0);
                   backend::fill(o[4], 0.0);
                   backend::batchnorm_stats(x, c, spatial, o[0]);
                   backend::batchnorm_normalize(x, mean, invstd, gamma, beta, relu, c, spatial, o[1]);
                   backend::batchnorm_backward_reduce(x, dy, mean, invstd, gamma, beta, relu, c, spatial,
                                                      o[2], o[3], o[4]);
                   backend::batchnorm_backward_dx(x, dy, mean, invstd, gamma, beta, relu, o[0], o[2], c,
                                                  spatial, o[5]);
                 });
        const char* names[] = {"stats", "normalize", "grad sums", "dgamma", "dbeta", "dx"};
        for (size_t i = 0; i < d.size(); ++i)
          EXPECT_TRUE(same_bits(d[i], v[i])) << names[i] << ", block " << block << (relu ? ", relu" : "");
      }
  }
}

TEST_F(CpuIsa, AttentionIsBitwiseGeneric) {
  for (const KernelTable<float>* table : vector_tables()) {
    SCOPED_TRACE(table->isa);
    for (int64_t t : {1, 37, 128}) {
      const int64_t b = 2, heads = 2, d = 24, c = heads * d;
      const Tensor qkv = test::random_tensor(Shape{b, t, 3 * c}, DType::F32, 1, -2, 2);
      const Tensor dout = test::random_tensor(Shape{b, t, c}, DType::F32, 2);
      auto [d0, v0] = both(
          *table,
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
}

}  // namespace
}  // namespace hpc
