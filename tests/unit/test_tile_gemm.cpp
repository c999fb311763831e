// The attention's float32 products (tile_product, backend/cpu/isa/tile_product.h),
// in every kernel table this CPU runs: against a float64 product on shapes
// with and without row and column tails, A read by rows and transposed, every
// causal pattern; a skipped causal term changes no bit; nothing outside C's
// m×n is written; the transpose; and float32 attention forward and backward
// against float64 attention.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/ops.h"
#include "grad_check.h"

namespace hpc {
namespace {

using backend::cpu::Causal;
using backend::cpu::KernelTable;
using StridedA = backend::cpu::StridedA<float>;

// The test's current table (each test runs for every table this CPU runs).
const KernelTable<float>* table = nullptr;

// A random row-major rows×cols matrix with the causal pattern's zeros (LowerA: A(i, k > i) = 0,
// UpperA: A(i, k < i) = 0), stored by rows or transposed.
struct Operand {
  std::vector<float> data;
  StridedA view;
};

Operand make_a(int64_t rows, int64_t cols, Causal causal, bool transposed, uint64_t seed) {
  Rng rng(seed, 3);
  Operand a;
  a.data.resize(size_t(rows * cols));
  const int64_t rs = transposed ? 1 : cols, cs = transposed ? rows : 1;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < cols; ++k) {
      const bool zero = (causal == Causal::LowerA && k > i) || (causal == Causal::UpperA && k < i);
      a.data[size_t(i * rs + k * cs)] = zero ? 0.0f : float(2 * rng.uniform() - 1);
    }
  a.view = StridedA{a.data.data(), rs, cs};
  return a;
}

std::vector<float> random_floats(int64_t count, uint64_t seed) {
  Rng rng(seed, 5);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = float(2 * rng.uniform() - 1);
  return v;
}

const float SENTINEL = 12345.0f;

// C = alpha·A·B for one shape and pattern, into a C with 3 guard columns and a guard row.
std::vector<float> run(int64_t m, int64_t n, int64_t k, float alpha, const StridedA& a,
                       const std::vector<float>& b, Causal causal) {
  const int64_t ldc = n + 3;
  std::vector<float> c(size_t((m + 1) * ldc), SENTINEL);
  table->tile_product(m, n, k, alpha, a, b.data(), n, c.data(), ldc, causal);
  return c;
}

TEST(TileGemm, MatchesFloat64OnEveryPatternAndTail) {
  for (const KernelTable<float>* each : backend::cpu::runnable_tables()) {
    table = each;
    SCOPED_TRACE(each->isa);
    const float alpha = 0.37f;
    for (Causal causal : {Causal::None, Causal::LowerOut, Causal::LowerA, Causal::UpperA})
      for (bool transposed : {false, true})
        for (int64_t m : {1, 5, 13, 37, 64})
          for (int64_t n : {1, 17, 40, 64})
            for (int64_t k : {1, 7, 64}) {
              if (causal != Causal::None && causal != Causal::LowerOut && k != m) continue;  // square A only
              if (causal == Causal::LowerOut && n != m) continue;                            // square C only
              const Operand a = make_a(m, k, causal, transposed, uint64_t(m * 1000 + n * 10 + k));
              const std::vector<float> b = random_floats(k * n, uint64_t(n + k));
              const std::vector<float> c = run(m, n, k, alpha, a.view, b, causal);
              const int64_t ldc = n + 3;
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                  if (causal == Causal::LowerOut && j > i) continue;  // unspecified
                  double want = 0, size = 0;
                  for (int64_t kk = 0; kk < k; ++kk) {
                    const double t = double(a.view.data[i * a.view.row_stride + kk * a.view.col_stride]) *
                                     double(b[size_t(kk * n + j)]);
                    want += t;
                    size += std::fabs(t);
                  }
                  want *= alpha;
                  ASSERT_NEAR(c[size_t(i * ldc + j)], want, 1e-6 * (1 + size))
                      << "m " << m << " n " << n << " k " << k << " causal " << int(causal)
                      << (transposed ? " Aᵀ" : "") << " at (" << i << ", " << j << ")";
                }
              for (int64_t i = 0; i <= m; ++i)
                for (int64_t j = i < m ? n : 0; j < ldc; ++j)
                  ASSERT_EQ(c[size_t(i * ldc + j)], SENTINEL)
                      << "written outside C at (" << i << ", " << j << ")";
            }
  }
}

// The terms a causal pattern leaves out are A's zeros: leaving them out must not change a bit.
TEST(TileGemm, SkippedCausalTermsChangeNoBit) {
  for (const KernelTable<float>* each : backend::cpu::runnable_tables()) {
    table = each;
    SCOPED_TRACE(each->isa);
    for (Causal causal : {Causal::LowerA, Causal::UpperA})
      for (bool transposed : {false, true})
        for (int64_t t : {9, 31, 128}) {
          const int64_t n = 40;
          const Operand a = make_a(t, t, causal, transposed, uint64_t(t));
          const std::vector<float> b = random_floats(t * n, 11);
          const std::vector<float> skipped = run(t, n, t, 0.5f, a.view, b, causal);
          const std::vector<float> whole = run(t, n, t, 0.5f, a.view, b, Causal::None);
          EXPECT_EQ(std::memcmp(skipped.data(), whole.data(), skipped.size() * sizeof(float)), 0)
              << "T " << t << " causal " << int(causal) << (transposed ? " Aᵀ" : "");
        }
    // LowerOut: the wanted lower triangle is the whole product's, bit for bit.
    const int64_t t = 45;
    const Operand a = make_a(t, 24, Causal::None, false, 3);
    const std::vector<float> b = random_floats(24 * t, 4);
    const std::vector<float> lower = run(t, t, 24, 1.0f, a.view, b, Causal::LowerOut);
    const std::vector<float> whole = run(t, t, 24, 1.0f, a.view, b, Causal::None);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j <= i; ++j)
        ASSERT_EQ(lower[size_t(i * (t + 3) + j)], whole[size_t(i * (t + 3) + j)]) << i << ", " << j;
  }
}

TEST(TileGemm, TransposeOfStridedRows) {
  for (const KernelTable<float>* each : backend::cpu::runnable_tables()) {
    table = each;
    SCOPED_TRACE(each->isa);
    for (int64_t rows : {1, 8, 13, 128})
      for (int64_t cols : {1, 8, 20, 64}) {
        const int64_t ld = cols + 5;
        const std::vector<float> x = random_floats(rows * ld, uint64_t(rows + cols));
        std::vector<float> out(size_t(rows * cols), SENTINEL);
        table->transpose(x.data(), rows, cols, ld, out.data());
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            ASSERT_EQ(out[size_t(j * rows + i)], x[size_t(i * ld + j)])
                << rows << "×" << cols << " at " << i << ", " << j;
      }
  }
}

// Float32 attention (tile_gemm) against float64 attention (OpenBLAS on the whole matrices); the
// gradient checks run in float64, so this is what checks the float32 products inside attention.
TEST(TileGemm, Float32AttentionMatchesFloat64) {
  for (const KernelTable<float>* each : backend::cpu::runnable_tables()) {
    table = each;
    SCOPED_TRACE(each->isa);
    const backend::cpu::UseKernels use(*each);
    for (int64_t t : {1, 37, 128}) {
      const int64_t b = 2, heads = 3, d = 20, c = heads * d;
      const Tensor qkv = test::random_tensor(Shape{b, t, 3 * c}, DType::F64, 1, -2, 2);
      const Tensor dout = test::random_tensor(Shape{b, t, c}, DType::F64, 2);
      auto attention = [&](DType dt, Tensor* probs, Tensor* out, Tensor* dqkv) {
        Tensor x(qkv.shape(), dt), g(dout.shape(), dt);
        backend::convert(qkv, x);
        backend::convert(dout, g);
        *probs = Tensor(Shape{b, heads, t, t}, dt);
        *out = Tensor(Shape{b, t, c}, dt);
        *dqkv = Tensor(qkv.shape(), dt);
        backend::attention_forward(x, heads, heads, *probs, *out);
        backend::attention_backward(x, *probs, g, heads, heads, *dqkv, Tensor(Shape{t, t}, dt));
      };
      Tensor p32, o32, g32, p64, o64, g64;
      attention(DType::F32, &p32, &o32, &g32);
      attention(DType::F64, &p64, &o64, &g64);
      const char* names[] = {"probabilities", "output", "dqkv"};
      const Tensor* got[] = {&p32, &o32, &g32};
      const Tensor* want[] = {&p64, &o64, &g64};
      for (int w = 0; w < 3; ++w)
        for (int64_t i = 0; i < want[w]->count(); ++i)
          ASSERT_NEAR(got[w]->data<float>()[i], want[w]->data<double>()[i],
                      2e-5 * (1 + std::fabs(want[w]->data<double>()[i])))
              << names[w] << " " << i << ", T " << t;
    }
  }
}

}  // namespace
}  // namespace hpc
