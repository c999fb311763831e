// The vocabulary-parallel cross-entropy (Megatron-LM's, with the padding
// masked): each rank of a tensor-parallel group holds the logits of its
// vocabulary shard, and the full row of logits is never gathered. Per row,
// three small reductions over the group replace it (backend ops
// vocab_shard_max / _sums / _grad between them):
//   the maximum M of the real logits,
//   Σ exp(z − M), Σ z and the label's logit Z (held by one shard, 0 elsewhere),
//   the count of logits that rank above the label (top-1 / top-5 hits).
// loss = M + log S − (1 − ε)·Z − ε/V·Σz, the unsplit row's formula
// (kernels/loss_math.h) on the same quantities, and every rank of the group
// computes it from the same reduced numbers: the same bits everywhere.
// Padded columns (the vocabulary rounded up to split evenly) are excluded
// from M and S, so they never win, and get a zero gradient.
#include <cmath>
#include <string>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/loss.h"

namespace hpc::nn {

namespace {

class VocabParallelCrossEntropy final : public Loss {
 public:
  VocabParallelCrossEntropy(double smoothing, TpComm& tp, const VocabSplit& vocab)
      : smoothing_(smoothing), tp_(tp), vocab_(vocab) {}
  std::string name() const override { return "cross_entropy"; }

  LossStats forward_backward(const Tensor& logits, const Tensor& targets, int64_t n_valid, double normalizer,
                             const Tensor& dlogits) override {
    HPC_ASSERT(logits.shape().rank() >= 2 && logits.shape()[0] > 0, "vocabulary-parallel loss: empty logits");
    HPC_ASSERT(normalizer > 0 && n_valid >= 0 && n_valid <= logits.shape()[0],
               "vocabulary-parallel loss: rows or normaliser");
    if (targets.dtype() != DType::I32)
      throw UserError(std::string("cross-entropy loss needs int32 class labels, got ") +
                      dtype_name(targets.dtype()) + " targets");
    const int64_t width = logits.shape()[logits.shape().rank() - 1];
    HPC_ASSERT(width == vocab_.shard, "vocabulary-parallel loss: logits of " + std::to_string(width) +
                                          " columns for a shard of " + std::to_string(vocab_.shard));
    // A language model's [N, T, V] rows are its tokens (loss.h): sums per token, gradient / T.
    const int64_t n = logits.shape()[0], per_sample = logits.count() / (n * width);
    if (targets.count() < n_valid * per_sample)
      throw UserError("cross-entropy loss: targets " + targets.shape().str() + " do not match logits " +
                      logits.shape().str());
    const int64_t rows = n * per_sample, valid = n_valid * per_sample;
    const Tensor z = logits.view(Shape{rows, width});
    const Tensor dz = dlogits.defined() ? dlogits.view(Shape{rows, width}) : Tensor();
    const Tensor labels = targets.view(Shape{targets.count()});
    const Tensor stats = scratch(stats_, Shape{4, rows}, DType::F64, logits.device());
    const Tensor above = scratch(above_, Shape{rows}, DType::F64, logits.device());
    backend::fill(stats, 0.0);
    backend::fill(above, 0.0);

    backend::vocab_shard_max(z, valid, vocab_.first, vocab_.vocab, stats);
    tp_.max(stats.slice(0, Shape{rows}));
    backend::vocab_shard_sums(z, labels, valid, vocab_.first, vocab_.vocab, stats);
    tp_.sum(stats.slice(rows, Shape{3 * rows}));
    const double grad_scale = 1.0 / (normalizer * static_cast<double>(per_sample));
    backend::vocab_shard_grad(z, labels, valid, vocab_.first, vocab_.vocab, smoothing_, grad_scale, stats, dz,
                              above);
    tp_.sum(above);

    // The per-row numbers on the host (a copy from the GPU), then the loss in row order.
    Tensor s = stats, a = above;
    if (logits.device() != Device::CPU) {
      s = Tensor(stats.shape(), DType::F64);
      a = Tensor(above.shape(), DType::F64);
      backend::copy(stats, s);
      backend::copy(above, a);
    }
    const double* st = s.data<double>();
    const double* ab = a.data<double>();
    const double off = smoothing_ / static_cast<double>(vocab_.vocab), on = 1 - smoothing_;
    LossStats out;
    out.count = valid;
    for (int64_t r = 0; r < valid; ++r) {
      const double m = st[r], sum_exp = st[rows + r], sum_z = st[2 * rows + r], zl = st[3 * rows + r];
      if (std::isnan(zl)) throw_bad_label(labels, r);  // the GPU marks a label outside the vocabulary so
      out.loss_sum += m + std::log(sum_exp) - on * zl - off * sum_z;
      out.correct1 += ab[r] < 1;
      if (vocab_.vocab >= 10) out.correct5 += ab[r] < 5;
    }
    return out;
  }

 private:
  [[noreturn]] void throw_bad_label(const Tensor& labels, int64_t row) const {
    Tensor host = labels;
    if (labels.device() != Device::CPU) {
      host = Tensor(labels.shape(), DType::I32);
      backend::copy(labels, host);
    }
    const int32_t id = host.data<int32_t>()[row];
    throw UserError("label " + std::to_string(id) + " of sample " + std::to_string(row) +
                    " is outside the model's " + std::to_string(vocab_.vocab) + " classes [0, " +
                    std::to_string(vocab_.vocab) + ")");
  }

  double smoothing_;
  TpComm& tp_;
  VocabSplit vocab_;
  Tensor stats_, above_;
};

}  // namespace

std::unique_ptr<Loss> make_vocab_parallel_cross_entropy(double label_smoothing, TpComm& tp,
                                                        const VocabSplit& vocab) {
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    throw UserError("label smoothing must be in [0, 1), got " + number_text(label_smoothing));
  return std::make_unique<VocabParallelCrossEntropy>(label_smoothing, tp, vocab);
}

}  // namespace hpc::nn
