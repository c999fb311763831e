// Losses and the classification metrics computed alongside them.
//
// A loss sees the logits [N, K] of one micro-batch. Only the first n_valid
// rows count (evaluation pads the last batch; padding rows are masked out
// of loss and metrics, so distributed evaluation is exact). The loss returns
// SUMS over valid rows so ranks can add them up exactly; the gradient it
// writes is d(Σ loss_i / normalizer)/dlogits, where the trainer passes
// normalizer = global samples per optimizer step / world size, so that the
// averaged gradient across ranks and micro-steps equals the gradient of the
// mean loss over the global batch.
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"
#include "nn/tensor_parallel.h"

namespace hpc::nn {

struct LossStats {
  double loss_sum = 0;   // Σ over valid rows of the per-sample loss
  int64_t count = 0;     // valid rows
  int64_t correct1 = 0;  // top-1 hits (classification only)
  int64_t correct5 = 0;  // top-5 hits (classification with K ≥ 10 only)
};

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  // targets: I32 [N] class ids (cross-entropy) or float [N, K] (MSE; dtype of logits).
  // Cross-entropy also takes logits [N, T, V] with I32 [N, T] next-token ids (a
  // language model): sums and counts are then per token, the gradient is
  // d(Σ token losses)/(normalizer·T), so the loss is the mean over tokens.
  // dlogits: written when defined (same shape as logits), else only stats are computed.
  virtual LossStats forward_backward(const Tensor& logits, const Tensor& targets, int64_t n_valid,
                                     double normalizer, const Tensor& dlogits) = 0;
};

// Softmax cross-entropy over K classes; label_smoothing ε mixes the one-hot
// target with the uniform distribution: (1-ε)·onehot + ε/K.
std::unique_ptr<Loss> make_cross_entropy(double label_smoothing);
// The same loss when the logits are this rank's shard of a vocabulary split over a tensor-parallel
// group (a split lm_head's output, nn/tensor_parallel.h): the full row of logits is never
// gathered; per row, the maximum, Σexp and the label's logit are reduced over the group
// (nn/vocab_parallel_loss.cpp). The padded columns never count. Every rank of the group returns
// the same statistics; each writes its shard of the gradient.
std::unique_ptr<Loss> make_vocab_parallel_cross_entropy(double label_smoothing, TpComm& tp,
                                                        const VocabSplit& vocab);
// Mean squared error: Σ_k (y_k - t_k)² per sample (loss_sum is its sum over rows).
std::unique_ptr<Loss> make_mse();

}  // namespace hpc::nn
