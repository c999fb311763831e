// oneDNN convolutions (backend/cpu/onednn.h) against the im2col + GEMM
// reference (nn/layers/conv_lowering.h), for every convolution shape the
// presets build: forward, backward-data and backward-weights agree within
// float tolerance; gradients pass a finite-difference check on the oneDNN
// path itself; repeated calls give the same bits. And the float32 products
// that gemm hands to oneDNN's matmul (m, n, k ≥ 64) agree with cblas_sgemm
// for every transpose, alpha and beta. Skipped (visibly) in a build without
// oneDNN or with HPCTRAIN_CPU_CONV=lowering.
#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/onednn.h"
#include "backend/cpu/switches.h"
#include "backend/ops.h"
#include "grad_check.h"
#include "nn/layers/conv_lowering.h"

namespace hpc {
namespace {

using kernels::ConvShape;

struct Case {
  const char* where;
  int64_t c, h, w, oc, k, stride, pad;
};

// Per-sample geometry of every convolution in the presets (MNIST 1×28×28, CIFAR-10 3×32×32).
const Case CASES[] = {
    {"lenet5 conv1", 1, 28, 28, 6, 5, 1, 2},     {"lenet5 conv2", 6, 14, 14, 16, 5, 1, 0},
    {"cnn conv1 mnist", 1, 28, 28, 32, 3, 1, 1}, {"cnn conv2 mnist", 32, 14, 14, 64, 3, 1, 1},
    {"cnn conv1 cifar", 3, 32, 32, 32, 3, 1, 1}, {"cnn conv2 cifar", 32, 16, 16, 64, 3, 1, 1},
    {"resnet20 stem", 3, 32, 32, 16, 3, 1, 1},   {"resnet20 stage1", 16, 32, 32, 16, 3, 1, 1},
    {"resnet20 down2", 16, 32, 32, 32, 3, 2, 1}, {"resnet20 stage2", 32, 16, 16, 32, 3, 1, 1},
    {"resnet20 down3", 32, 16, 16, 64, 3, 2, 1}, {"resnet20 stage3", 64, 8, 8, 64, 3, 1, 1},
    {"resnet20 proj2", 16, 32, 32, 32, 1, 2, 0}, {"resnet20 proj3", 32, 16, 16, 64, 1, 2, 0},
};

constexpr int64_t BATCH = 3;

struct Tensors {
  ConvShape g;
  Tensor x, w, dy;
};

Tensors make(const Case& c, uint64_t seed) {
  Tensors t;
  t.g = ConvShape::make(1, c.c, c.h, c.w, c.k, c.stride, c.pad);
  t.x = test::random_tensor(Shape{BATCH, c.c, c.h, c.w}, DType::F32, seed);
  t.w = test::random_tensor(Shape{c.oc, c.c, c.k, c.k}, DType::F32, seed + 1);
  t.dy = test::random_tensor(Shape{BATCH, c.oc, t.g.out_h, t.g.out_w}, DType::F32, seed + 2);
  return t;
}

// max |a - b| / (atol + rtol·|b|) ≤ 1, with the float rounding of a K-term sum in mind.
void expect_close(const Tensor& a, const Tensor& b, int64_t terms, const std::string& what) {
  ASSERT_EQ(a.count(), b.count());
  const double tol = 4 * double(terms) * 1.2e-7;
  double worst = 0;
  for (int64_t i = 0; i < a.count(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    worst = std::max(worst, std::fabs(x - y) / (tol * (1 + std::fabs(y))));
  }
  EXPECT_LE(worst, 1.0) << what;
}

bool same_bits(const Tensor& a, const Tensor& b) { return std::memcmp(a.raw(), b.raw(), a.num_bytes()) == 0; }

class OnednnConv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend::cpu::onednn::enabled()) GTEST_SKIP() << backend::cpu::onednn::describe();
  }
};

TEST_F(OnednnConv, TakesFloat32OnlyAndSaysWhichIsa) {
  const Tensors t = make(CASES[0], 1);
  const Tensor y(Shape{BATCH, 6, 28, 28}, DType::F32);
  EXPECT_TRUE(backend::conv2d_supported(t.x, t.w, y, t.g));
  const Tensor x64(t.x.shape(), DType::F64), w64(t.w.shape(), DType::F64), y64(y.shape(), DType::F64);
  EXPECT_FALSE(backend::conv2d_supported(x64, w64, y64, t.g));  // float64 gradient checks use the lowering
  EXPECT_NE(backend::cpu::onednn::describe().find("ISA"), std::string::npos);
}

// Winograd where it pays (3×3, stride 1, ≥ 32 channels in and out; the weight gradient only with
// ≥ 64 on outputs that tile into 4×4), direct elsewhere, so that the comparisons below cover both. Where
// this oneDNN has no Winograd kernel for the ISA (2.6: AVX-512 only), or with
// HPCTRAIN_CPU_CONV_ALGO=direct, every pass is direct.
TEST_F(OnednnConv, RunsWinogradWhereItPays) {
  const bool winograd = backend::cpu::onednn::describe().find("Winograd") != std::string::npos;
  auto kernels = [](const Case& c) {
    const Tensors t = make(c, 1);
    return backend::cpu::onednn::implementations(t.x, t.w, t.g, t.dy);
  };
  auto count = [](const std::string& s) {
    int n = 0;
    for (size_t at = s.find("wino"); at != std::string::npos; at = s.find("wino", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(kernels(CASES[11])), winograd ? 3 : 0) << kernels(CASES[11]);  // stage3, 64 @ 8×8
  EXPECT_EQ(count(kernels(CASES[9])), winograd ? 2 : 0) << kernels(CASES[9]);  // 32 @ 16×16: weights direct
  EXPECT_EQ(count(kernels(CASES[3])), winograd ? 2 : 0) << kernels(CASES[3]);  // 14×14: weights direct
  EXPECT_EQ(count(kernels(CASES[7])), 0) << kernels(CASES[7]);                 // 16 channels
  // ... whose forward runs as its mirror's backward-data pass (faster there), unless switched off.
  EXPECT_EQ(kernels(CASES[7]).find("mirrored") != std::string::npos,
            !backend::cpu::switched(backend::cpu::Switch::ConvAlgo))
      << kernels(CASES[7]);
  EXPECT_EQ(kernels(CASES[8]).find("mirrored"), std::string::npos) << kernels(CASES[8]);  // stride 2
  EXPECT_EQ(count(kernels(CASES[10])), 0) << kernels(CASES[10]);                          // stride 2
  EXPECT_EQ(count(kernels(CASES[2])), 0) << kernels(CASES[2]);                            // 1 input channel
}

TEST_F(OnednnConv, AgreesWithTheLoweringOnEveryPresetShape) {
  uint64_t seed = 10;
  for (const Case& c : CASES) {
    const Tensors t = make(c, seed += 3);
    const Shape ys = t.dy.shape();
    Tensor y(ys, DType::F32), y_ref(ys, DType::F32);
    nn::ConvScratch scratch;
    backend::conv2d_forward(t.x, t.w, t.g, y);
    nn::lowered_conv2d_forward(t.x, t.w, t.g, y_ref, scratch);
    expect_close(y, y_ref, t.g.col_rows(), std::string(c.where) + ": forward");

    // dweight accumulates: both start from the same non-zero values.
    Tensor dw = test::random_tensor(t.w.shape(), DType::F32, seed + 7), dw_ref(t.w.shape(), DType::F32);
    backend::copy(dw, dw_ref);
    Tensor dx(t.x.shape(), DType::F32), dx_ref(t.x.shape(), DType::F32);
    backend::fill(dx, 123.0);  // written, not accumulated
    backend::conv2d_backward(t.x, t.w, t.dy, t.g, dw, dx);
    nn::lowered_conv2d_backward(t.x, t.w, t.dy, t.g, dw_ref, dx_ref, scratch);
    expect_close(dw, dw_ref, BATCH * t.g.out_pixels(), std::string(c.where) + ": backward weights");
    expect_close(dx, dx_ref, c.oc * c.k * c.k, std::string(c.where) + ": backward data");

    // No dx: only the weight gradient, added once more.
    backend::conv2d_backward(t.x, t.w, t.dy, t.g, dw, Tensor());
    nn::lowered_conv2d_backward(t.x, t.w, t.dy, t.g, dw_ref, Tensor(), scratch);
    expect_close(dw, dw_ref, 2 * BATCH * t.g.out_pixels(),
                 std::string(c.where) + ": backward weights, no dx");
  }
}

// L = Σ r·y is linear in x and in w, so a central difference is exact up to
// rounding with any step: a float32 finite-difference check of the oneDNN
// gradients themselves, element by element.
TEST_F(OnednnConv, GradientsPassAFiniteDifferenceCheck) {
  for (const Case& c : {CASES[1], CASES[8], CASES[13], CASES[3], CASES[11]}) {
    const Tensors t = make(c, 99);
    Tensor y(t.dy.shape(), DType::F32);
    auto loss = [&] {
      backend::conv2d_forward(t.x, t.w, t.g, y);
      double l = 0;
      for (int64_t i = 0; i < y.count(); ++i) l += double(y.data<float>()[i]) * t.dy.data<float>()[i];
      return l;
    };
    Tensor dw(t.w.shape(), DType::F32), dx(t.x.shape(), DType::F32);
    backend::fill(dw, 0.0);
    backend::conv2d_backward(t.x, t.w, t.dy, t.g, dw, dx);
    const double h = 0.5;
    auto check = [&](const Tensor& p, const Tensor& grad, const char* name) {
      Rng rng(5, 3);
      for (int trial = 0; trial < 40; ++trial) {
        const int64_t i = static_cast<int64_t>(rng.uniform() * double(p.count())) % p.count();
        float& v = p.data<float>()[i];
        const float keep = v;
        v = keep + float(h);
        const double up = loss();
        v = keep - float(h);
        const double down = loss();
        v = keep;
        const double numeric = (up - down) / (2 * h), analytic = grad.data<float>()[i];
        EXPECT_NEAR(analytic, numeric, 2e-3 * (1 + std::fabs(numeric)))
            << c.where << ": " << name << "[" << i << "]";
      }
    };
    check(t.x, dx, "dx");
    check(t.w, dw, "dw");
  }
}

TEST_F(OnednnConv, RepeatsBitForBit) {
  for (const Case& c : {CASES[3], CASES[10], CASES[11]}) {
    const Tensors t = make(c, 42);
    Tensor y1(t.dy.shape(), DType::F32), y2(t.dy.shape(), DType::F32);
    Tensor dw1(t.w.shape(), DType::F32), dw2(t.w.shape(), DType::F32);
    Tensor dx1(t.x.shape(), DType::F32), dx2(t.x.shape(), DType::F32);
    backend::fill(dw1, 0.0);
    backend::fill(dw2, 0.0);
    backend::conv2d_forward(t.x, t.w, t.g, y1);
    backend::conv2d_backward(t.x, t.w, t.dy, t.g, dw1, dx1);
    backend::conv2d_forward(t.x, t.w, t.g, y2);
    backend::conv2d_backward(t.x, t.w, t.dy, t.g, dw2, dx2);
    EXPECT_TRUE(same_bits(y1, y2)) << c.where;
    EXPECT_TRUE(same_bits(dw1, dw2)) << c.where;
    EXPECT_TRUE(same_bits(dx1, dx2)) << c.where;
  }
}

TEST_F(OnednnConv, GemmInOnednnAgreesWithOpenblas) {
  EXPECT_TRUE(backend::cpu::onednn::matmul_wins(64, 512, 784));
  EXPECT_FALSE(backend::cpu::onednn::matmul_wins(64, 10, 512));  // a 10-class output layer stays in OpenBLAS
  const int64_t m = 70, n = 96, k = 130;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 1.0, 0.5}) {
        const Tensor a = test::random_tensor(Shape{m * k}, DType::F32, 1),
                     b = test::random_tensor(Shape{k * n}, DType::F32, 2);
        const Tensor c0 = test::random_tensor(Shape{m * n}, DType::F32, 3);
        Tensor c(c0.shape(), DType::F32), ref(c0.shape(), DType::F32), again(c0.shape(), DType::F32);
        backend::copy(c0, c);
        backend::copy(c0, ref);
        backend::copy(c0, again);
        backend::gemm(ta, tb, m, n, k, 0.75, a, b, beta, c);
        backend::gemm(ta, tb, m, n, k, 0.75, a, b, beta, again);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m),
                    int(n), int(k), 0.75f, a.data<float>(), int(ta ? m : k), b.data<float>(), int(tb ? k : n),
                    float(beta), ref.data<float>(), int(n));
        const std::string what =
            "ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " beta " + std::to_string(beta);
        expect_close(c, ref, k, what);
        EXPECT_TRUE(same_bits(c, again)) << what;
      }
}

}  // namespace
}  // namespace hpc
