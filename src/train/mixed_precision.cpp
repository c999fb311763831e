// MixedPrecision (see mixed_precision.h).
#include "train/mixed_precision.h"

#include <cmath>
#include <string>

#include "backend/ops.h"
#include "core/error.h"
#include "core/mem_ledger.h"

namespace hpc::train {

bool DynamicLossScale::update(bool found_nonfinite) {
  kernels::update_loss_scale(scale_, found_nonfinite);
  if (!found_nonfinite) {
    consecutive_skips_ = 0;
    return true;
  }
  ++skipped_;
  ++consecutive_skips_;
  return false;
}

DynamicLossScale::State DynamicLossScale::state() const {
  return {scale_.scale, scale_.good_steps, skipped_, consecutive_skips_};
}

void DynamicLossScale::restore(const State& s) {
  const auto as_float = static_cast<float>(s.scale);
  if (!(s.scale > 0) || !std::isfinite(as_float) || static_cast<double>(as_float) != s.scale)
    throw UserError("loss scaling state: the loss scale " + std::to_string(s.scale) +
                    " is not a positive float");
  if (s.good_steps < 0 || s.good_steps >= scale_.growth_interval || s.skipped_steps < 0 ||
      s.consecutive_skips < 0 || s.consecutive_skips > s.skipped_steps)
    throw UserError("loss scaling state: implausible counters (clean steps " + std::to_string(s.good_steps) +
                    ", skipped " + std::to_string(s.skipped_steps) + ", in a row " +
                    std::to_string(s.consecutive_skips) + ")");
  scale_.scale = as_float;
  scale_.good_steps = static_cast<int32_t>(s.good_steps);
  skipped_ = s.skipped_steps;
  consecutive_skips_ = s.consecutive_skips;
}

DType MixedPrecision::model_dtype(Precision precision, Device device) {
  if (precision == Precision::Fp32) return DType::F32;
  if (device != Device::CUDA)
    throw UserError(std::string("--train.precision ") + name_of(precision) +
                    " needs a GPU (--train.device cuda); the CPU trains in fp32");
  return precision == Precision::Bf16 ? DType::BF16 : DType::F16;
}

MixedPrecision::MixedPrecision(Precision precision, Device device, const Tensor& model_params,
                               const Tensor& model_grads, int64_t shard_lo, int64_t shard_hi)
    : precision_(precision),
      model_dtype_(model_dtype(precision, device)),
      scaling_(precision == Precision::Fp16),
      params_(model_params),
      grads_(model_grads) {
  HPC_ASSERT(model_params.dtype() == model_dtype_ && model_grads.dtype() == model_dtype_,
             std::string("mixed precision: the model is not in ") + name());
  if (shard_hi < 0) shard_hi = model_params.count();
  HPC_ASSERT(0 <= shard_lo && shard_lo <= shard_hi && shard_hi <= model_params.count(),
             "mixed precision: shard outside the parameter buffer");
  const Shape flat{shard_hi - shard_lo};
  params_shard_ =
      shard_lo == 0 && shard_hi == model_params.count() ? model_params : model_params.slice(shard_lo, flat);
  grads_shard_ =
      shard_lo == 0 && shard_hi == model_grads.count() ? model_grads : model_grads.slice(shard_lo, flat);
  if (!sixteen_bit()) return;
  {
    const MemUseScope use(MemUse::OptimizerState);  // as the optimizer_state_mb figure counts them
    master_ = Tensor(flat, DType::F32, model_params.device());
  }
  {
    const MemUseScope use(MemUse::Grads);
    grads32_ = Tensor(flat, DType::F32, model_params.device());
  }
  if (flat.count() > 0) backend::convert(params_shard_, master_);
}

bool MixedPrecision::unscale() {
  if (!sixteen_bit()) return true;
  if (!scaling_) {
    // bf16: S = 1, and an inf/NaN is divergence, which the gradient-norm check
    // reports; a plain conversion spares waiting for a count.
    if (grads32_.count() > 0) backend::convert(grads_shard_, grads32_);
    return true;
  }
  double nonfinite =
      grads32_.count() > 0
          ? static_cast<double>(backend::unscale_grads(grads_shard_, grads32_, 1.0 / loss_scale()))
          : 0.0;
  if (max_over_ranks_) nonfinite = max_over_ranks_(nonfinite);
  if (scale_.update(nonfinite > 0)) return true;
  if (consecutive_skips() >= MAX_CONSECUTIVE_SKIPS)
    throw UserError("training diverged: " + std::to_string(MAX_CONSECUTIVE_SKIPS) +
                    " consecutive fp16 steps had inf/NaN gradients (loss scale now " +
                    std::to_string(loss_scale()) + "): lower --optim.lr or use --train.precision bf16");
  return false;
}

void MixedPrecision::publish() {
  if (sixteen_bit() && master_.count() > 0) backend::convert(master_, params_shard_);
}

}  // namespace hpc::train
