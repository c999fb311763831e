// MixedPrecision (see mixed_precision.h).
#include "train/mixed_precision.h"

#include "backend/ops_amp.h"
#include "backend/ops_core.h"
#include "core/error.h"

namespace hpc::train {

MixedPrecision::MixedPrecision(const std::string& precision, Device device) : name_(precision) {
  if (precision == "fp32") return;
  if (precision != "bf16" && precision != "fp16")
    throw UserError("--train.precision: unknown precision '" + precision + "' (expected fp32 | bf16 | fp16)");
  if (device != Device::CUDA)
    throw UserError("--train.precision " + precision +
                    " needs a GPU (--train.device cuda); the CPU trains in fp32");
  model_dtype_ = precision == "bf16" ? DType::BF16 : DType::F16;
  scaling_ = precision == "fp16";
}

void MixedPrecision::attach(const Tensor& model_params, const Tensor& model_grads) {
  HPC_ASSERT(model_params.dtype() == model_dtype_ && model_grads.dtype() == model_dtype_,
             "mixed precision: the model is not in " + name_);
  params_ = model_params;
  grads_ = model_grads;
  if (!sixteen_bit()) return;
  const Shape flat{model_params.count()};
  if (!master_.defined() || master_.count() != model_params.count()) {
    master_ = Tensor(flat, DType::F32, model_params.device());
    grads32_ = Tensor(flat, DType::F32, model_params.device());
  }
  backend::convert(model_params, master_);
}

bool MixedPrecision::unscale() {
  if (!sixteen_bit()) return true;
  if (!scaling_) {
    // bf16: S = 1, and an inf/NaN is divergence, which the gradient-norm check
    // reports; a plain conversion spares waiting for a count.
    backend::convert(grads_, grads32_);
    return true;
  }
  const int64_t nonfinite = backend::unscale_grads(grads_, grads32_, 1.0 / loss_scale());
  kernels::update_loss_scale(scale_, nonfinite > 0);
  if (nonfinite == 0) {
    consecutive_skips_ = 0;
    return true;
  }
  ++skipped_;
  ++consecutive_skips_;
  return false;
}

void MixedPrecision::publish() {
  if (sixteen_bit()) backend::convert(master_, params_);
}

}  // namespace hpc::train
