// Cross-entropy and MSE losses (loss.h): shape checks at the boundary, then
// one backend op that computes the loss sum, the metrics and the gradient in
// a single pass over the logits.
#include "nn/loss.h"

#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"

namespace hpc::nn {

namespace {

// Logits of any rank ≥ 1 are [N, rest]; returns K.
int64_t check_common(const std::string& loss, const Tensor& logits, int64_t n_valid, double normalizer,
                     const Tensor& dlogits) {
  HPC_ASSERT(logits.shape().rank() >= 1 && logits.shape()[0] > 0, loss + ": empty logits");
  const int64_t n = logits.shape()[0];
  HPC_ASSERT(n_valid >= 0 && n_valid <= n,
             loss + ": n_valid " + std::to_string(n_valid) + " of " + std::to_string(n) + " rows");
  HPC_ASSERT(normalizer > 0, loss + ": normalizer must be positive");
  HPC_ASSERT(!dlogits.defined() || dlogits.count() == logits.count(), loss + ": dlogits shape");
  return logits.count() / n;
}

class CrossEntropy final : public Loss {
 public:
  explicit CrossEntropy(double smoothing) : smoothing_(smoothing) {}
  std::string name() const override { return "cross_entropy"; }

  LossStats forward_backward(const Tensor& logits, const Tensor& targets, int64_t n_valid, double normalizer,
                             const Tensor& dlogits) override {
    const int64_t k = check_common(name(), logits, n_valid, normalizer, dlogits);
    if (targets.dtype() != DType::I32)
      throw UserError(std::string("cross-entropy loss needs int32 class labels, got ") +
                      dtype_name(targets.dtype()) + " targets (use --train.loss mse for float targets)");
    if (logits.shape().rank() == 3 && targets.shape().rank() == 2)
      return sequence(logits, targets, n_valid, normalizer, dlogits);
    if (targets.count() < n_valid)
      throw UserError("cross-entropy loss: " + std::to_string(targets.count()) + " labels for " +
                      std::to_string(n_valid) + " samples");
    const auto s = backend::softmax_cross_entropy(logits, targets, n_valid, smoothing_, 1.0 / normalizer,
                                                  k >= 10, dlogits);
    return LossStats{s.loss_sum, n_valid, s.correct1, s.correct5};
  }

 private:
  // A language model's logits [N, T, V] against next-token ids [N, T]: every
  // token is one classification row. The sums and counts are per token, and
  // the gradient is divided by T as well as by the per-sample normaliser, so
  // the trainer's bookkeeping stays per sample and the loss is the mean over
  // the global batch's tokens.
  LossStats sequence(const Tensor& logits, const Tensor& targets, int64_t n_valid, double normalizer,
                     const Tensor& dlogits) const {
    const int64_t n = logits.shape()[0], t = logits.shape()[1], v = logits.shape()[2];
    if (targets.shape()[1] != t || targets.shape()[0] < n_valid)
      throw UserError("cross-entropy loss: targets " + targets.shape().str() + " do not match logits " +
                      logits.shape().str() + " (one next-token id per position)");
    const Tensor rows = logits.view(Shape{n * t, v});
    const Tensor grad = dlogits.defined() ? dlogits.view(Shape{n * t, v}) : Tensor();
    const auto s = backend::softmax_cross_entropy(rows, targets.view(Shape{targets.count()}), n_valid * t,
                                                  smoothing_, 1.0 / (normalizer * double(t)), v >= 10, grad);
    return LossStats{s.loss_sum, n_valid * t, s.correct1, s.correct5};
  }

  double smoothing_;
};

class MeanSquaredError final : public Loss {
 public:
  std::string name() const override { return "mse"; }

  LossStats forward_backward(const Tensor& logits, const Tensor& targets, int64_t n_valid, double normalizer,
                             const Tensor& dlogits) override {
    check_common(name(), logits, n_valid, normalizer, dlogits);
    if (targets.dtype() != logits.dtype() || targets.count() != logits.count())
      throw UserError("mse loss: the targets (" + targets.shape().str() + ", " + dtype_name(targets.dtype()) +
                      ") do not match the model output (" + logits.shape().str() + ", " +
                      dtype_name(logits.dtype()) + ")");
    const double sum = backend::squared_error(logits, targets, n_valid, 1.0 / normalizer, dlogits);
    return LossStats{sum, n_valid, 0, 0};
  }
};

}  // namespace

std::unique_ptr<Loss> make_cross_entropy(double label_smoothing) {
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    throw UserError("label smoothing must be in [0, 1), got " + number_text(label_smoothing));
  return std::make_unique<CrossEntropy>(label_smoothing);
}

std::unique_ptr<Loss> make_mse() { return std::make_unique<MeanSquaredError>(); }

}  // namespace hpc::nn
