// Loss tests: finite-difference gradients of cross-entropy (with and
// without label smoothing) and MSE with padding rows masked out, known
// values, numerical stability, top-1/top-5 counts and bad targets.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "grad_check.h"
#include "nn/loss.h"

namespace hpc::nn {
namespace {

using test::random_tensor;

Tensor labels(std::vector<int32_t> v) {
  Tensor t(Shape{int64_t(v.size())}, DType::I32);
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

// Central differences of loss_sum / normalizer w.r.t. every logit, against dlogits.
// h = 1e-5 in double: truncation and rounding errors are both ≈ 1e-10 (see grad_check.h).
void check_gradient(Loss& loss, const Tensor& logits, const Tensor& targets, int64_t n_valid,
                    double normalizer) {
  Tensor grad(logits.shape(), DType::F64);
  backend::fill(grad, 123.0);  // rows past n_valid must be overwritten with 0
  const LossStats stats = loss.forward_backward(logits, targets, n_valid, normalizer, grad);
  EXPECT_EQ(stats.count, n_valid);
  const int64_t k = logits.count() / logits.shape()[0];
  double* z = logits.data<double>();
  for (int64_t i = 0; i < logits.count(); ++i) {
    const double saved = z[i], h = 1e-5;
    z[i] = saved + h;
    const double up = loss.forward_backward(logits, targets, n_valid, normalizer, Tensor()).loss_sum;
    z[i] = saved - h;
    const double down = loss.forward_backward(logits, targets, n_valid, normalizer, Tensor()).loss_sum;
    z[i] = saved;
    const double numeric = (up - down) / (2 * h) / normalizer;
    const double a = grad.data<double>()[i];
    EXPECT_LT(std::abs(a - numeric) / std::max({std::abs(a), std::abs(numeric), 0.1}), 1e-7)
        << loss.name() << " element " << i;
    if (i / k >= n_valid) {
      EXPECT_EQ(a, 0.0) << "padding row " << i / k;
    }
  }
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const Tensor logits = random_tensor(Shape{5, 7}, DType::F64, 1, -3, 3);
  const Tensor y = labels({3, 0, 6, 2, 5});
  for (double smoothing : {0.0, 0.1}) {
    auto loss = make_cross_entropy(smoothing);
    check_gradient(*loss, logits, y, 5, 5.0);
    check_gradient(*loss, logits, y, 3, 2.5);  // two padding rows
  }
}

TEST(CrossEntropy, KnownValues) {
  // Equal logits: softmax is uniform, so the loss is log K for any label and any smoothing.
  const int64_t n = 4, k = 10;
  Tensor logits(Shape{n, k}, DType::F64);
  backend::fill(logits, 2.5);
  for (double smoothing : {0.0, 0.2}) {
    const LossStats s =
        make_cross_entropy(smoothing)->forward_backward(logits, labels({1, 2, 3, 9}), n, 1, Tensor());
    EXPECT_NEAR(s.loss_sum, n * std::log(double(k)), 1e-12);
  }
  // One row against a hand-computed log-softmax: z = (0, 1, 2), label 2, smoothing 0.3.
  Tensor z(Shape{1, 3}, DType::F64);
  for (int j = 0; j < 3; ++j) z.data<double>()[j] = j;
  const double lse = std::log(1 + std::exp(1.0) + std::exp(2.0));
  const double t_on = 0.7 + 0.1, t_off = 0.1;
  const double ref = -(t_off * (0 - lse) + t_off * (1 - lse) + t_on * (2 - lse));
  EXPECT_NEAR(make_cross_entropy(0.3)->forward_backward(z, labels({2}), 1, 1, Tensor()).loss_sum, ref, 1e-12);
}

TEST(CrossEntropy, StableForHugeLogits) {
  Tensor z(Shape{2, 3}, DType::F32);
  const float v[] = {1000.f, 0.f, -1000.f, 3e4f, 3e4f, 3e4f};
  for (int i = 0; i < 6; ++i) z.data<float>()[i] = v[i];
  Tensor grad(z.shape(), DType::F32);
  const LossStats s = make_cross_entropy(0)->forward_backward(z, labels({1, 0}), 2, 1, grad);
  EXPECT_NEAR(s.loss_sum, 1000.0 + std::log(3.0), 1e-3);  // row 0: 1000 − 0 (+ e^-1000 terms); row 1: log 3
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(grad.data<float>()[i]));
  EXPECT_NEAR(grad.data<float>()[1], -1.0f, 1e-6);
}

TEST(CrossEntropy, TopOneAndTopFiveCounts) {
  // K = 10, logits 9, 8, …, 0 in every row: class j has rank j.
  const int64_t k = 10;
  Tensor z(Shape{6, k}, DType::F64);
  for (int64_t i = 0; i < z.count(); ++i) z.data<double>()[i] = double(k - 1 - i % k);
  const Tensor y = labels({0, 2, 4, 5, 9, 1});
  auto ce = make_cross_entropy(0);
  LossStats s = ce->forward_backward(z, y, 6, 1, Tensor());
  EXPECT_EQ(s.correct1, 1);                        // label 0
  EXPECT_EQ(s.correct5, 4);                        // labels 0, 2, 4, 1
  s = ce->forward_backward(z, y, 4, 1, Tensor());  // padding rows do not count
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.correct5, 3);
  // Fewer than 10 classes: no top-5 (it would be nearly always right).
  Tensor small(Shape{2, 5}, DType::F64);
  for (int64_t i = 0; i < small.count(); ++i) small.data<double>()[i] = double(i % 5);
  s = ce->forward_backward(small, labels({4, 0}), 2, 1, Tensor());
  EXPECT_EQ(s.correct1, 1);
  EXPECT_EQ(s.correct5, 0);
}

// Float32 rows take their exps in float (cpu/loss_ops.cpp), float64 rows in double: rows
// shorter than, equal to and longer than the 8-lane exp, with a tail and without.
TEST(CrossEntropy, Float32AgreesWithFloat64) {
  for (int64_t k : {3, 8, 12, 17, 256}) {
    const Tensor z64 = random_tensor(Shape{8, k}, DType::F64, uint64_t(k), -5, 5);
    Tensor z32(z64.shape(), DType::F32);
    backend::convert(z64, z32);
    const Tensor y = labels({0, 1, 2, 2, 1, 0, int32_t(k - 1), int32_t(k / 2)});
    Tensor g64(z64.shape(), DType::F64), g32(z64.shape(), DType::F32), g32_64(z64.shape(), DType::F64);
    auto ce = make_cross_entropy(0.1);
    const double l64 = ce->forward_backward(z64, y, 8, 8, g64).loss_sum;
    const double l32 = ce->forward_backward(z32, y, 8, 8, g32).loss_sum;
    backend::convert(g32, g32_64);
    EXPECT_NEAR(l32, l64, 1e-5 * std::abs(l64)) << k << " classes";  // inputs rounded to float: ~6e-8 each
    backend::axpy(-1, g64, g32_64);
    EXPECT_LT(std::sqrt(backend::sum_squares(g32_64)), 1e-6 * std::sqrt(backend::sum_squares(g64)) + 1e-8)
        << k << " classes";
  }
}

TEST(CrossEntropy, BadInput) {
  Tensor z(Shape{2, 3}, DType::F64);
  EXPECT_THROW(make_cross_entropy(0)->forward_backward(z, labels({0, 3}), 2, 1, Tensor()), UserError);
  EXPECT_THROW(make_cross_entropy(0)->forward_backward(z, labels({-1, 0}), 2, 1, Tensor()), UserError);
  EXPECT_NO_THROW(make_cross_entropy(0)->forward_backward(z, labels({0, 7}), 1, 1, Tensor()));  // padding row
  EXPECT_THROW(make_cross_entropy(0)->forward_backward(z, z, 2, 1, Tensor()), UserError);
  EXPECT_THROW(make_cross_entropy(1.0), UserError);
  EXPECT_THROW(make_cross_entropy(-0.1), UserError);
}

TEST(MeanSquaredError, GradientAndKnownValue) {
  const Tensor y = random_tensor(Shape{4, 3}, DType::F64, 5);
  const Tensor t = random_tensor(Shape{4, 3}, DType::F64, 6);
  auto mse = make_mse();
  check_gradient(*mse, y, t, 4, 4.0);
  check_gradient(*mse, y, t, 2, 3.0);
  Tensor ones(Shape{4, 3}, DType::F64), zeros(Shape{4, 3}, DType::F64);
  backend::fill(ones, 1.0);
  const LossStats s = mse->forward_backward(ones, zeros, 3, 1, Tensor());
  EXPECT_NEAR(s.loss_sum, 9.0, 1e-15);  // Σ_k (1 − 0)² = 3 per row, 3 valid rows
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.correct1, 0);
  Tensor wrong(Shape{4, 2}, DType::F64);
  EXPECT_THROW(mse->forward_backward(y, wrong, 4, 1, Tensor()), UserError);
}

}  // namespace
}  // namespace hpc::nn
