// Mixed precision: train.precision = fp32 | bf16 | fp16.
//
// fp32 is a pass-through. bf16 and fp16 (GPU only) follow "Mixed Precision
// Training" (Micikevicius et al. 2018): the model — its ONE flat parameter
// buffer, its ONE flat gradient buffer and its activations — is 16-bit, so
// GEMMs and convolutions run on tensor cores and gradient buckets are half
// the bytes; this class keeps the fp32 master weights and an fp32 gradient
// buffer, and the optimizer (and its state) works on those:
//
//   loss gradient × S → backward (16-bit grads, all-reduced) → unscale into
//   fp32 grads (× 1/S, counting inf/NaN) → clip → optimizer step on the
//   fp32 master weights → publish: model params ← master, rounded.
//
// S is the loss scale: 1 for bf16 (float's exponent range), dynamic for fp16
// (kernels/amp_math.h: halve and skip the step on an overflow, double after
// 2000 clean steps — PyTorch's GradScaler). A skipped step leaves the
// parameters and the optimizer state untouched; it is counted and logged.
// The scale and its counters (DynamicLossScale) go into checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "config/config.h"
#include "core/tensor.h"
#include "kernels/amp_math.h"

namespace hpc::train {

// fp16's dynamic loss scale and its counters: host state only (the rule is
// kernels/amp_math.h), apart from the GPU buffers, so that it can be saved,
// restored and tested on any machine. An exact resume needs all of it: the
// scale, the clean steps counted towards the next growth, and the skipped
// steps (logged; the consecutive ones end a diverged run).
class DynamicLossScale {
 public:
  struct State {
    double scale = 65536;  // kernels::LossScale's initial 2^16
    int64_t good_steps = 0, skipped_steps = 0, consecutive_skips = 0;
  };

  double scale() const { return scale_.scale; }
  // After a step's gradients were checked: updates the scale and the counters.
  // Returns true when the step may be applied (no inf/NaN).
  bool update(bool found_nonfinite);
  int64_t skipped_steps() const { return skipped_; }
  int64_t consecutive_skips() const { return consecutive_skips_; }

  State state() const;
  // UserError for a state no run can reach (a scale that is not a positive
  // float, negative counters): the checkpoint reader checks too.
  void restore(const State& s);

 private:
  kernels::LossScale scale_;
  int64_t skipped_ = 0, consecutive_skips_ = 0;
};

class MixedPrecision {
 public:
  // The dtype a model trained in `precision` is built in (float32, bfloat16
  // or float16). UserError for a 16-bit precision on the CPU.
  static DType model_dtype(Precision precision, Device device);

  // Takes the flat buffers of the model built in model_dtype(precision,
  // device), with the parameters every rank starts from (after the start-up
  // broadcast): a 16-bit run copies them into its fp32 master weights here.
  // [shard_lo, shard_hi): the range of the flat buffers this rank's optimizer steps (ZeRO,
  // train/sharding.h; shard_hi < 0: all of it). The master weights and fp32 gradients exist for
  // that range only; optimizer_params()/optimizer_grads() are that range.
  MixedPrecision(Precision precision, Device device, const Tensor& model_params, const Tensor& model_grads,
                 int64_t shard_lo = 0, int64_t shard_hi = -1);

  const char* name() const { return name_of(precision_); }
  DType model_dtype() const { return model_dtype_; }
  bool sixteen_bit() const { return model_dtype_ != DType::F32; }
  // What the optimizer steps and clipping measures: the master weights and
  // fp32 gradients (16-bit), or the model's own buffers (fp32).
  const Tensor& optimizer_params() const { return sixteen_bit() ? master_ : params_shard_; }
  const Tensor& optimizer_grads() const { return sixteen_bit() ? grads32_ : grads_shard_; }
  // fp16 with sharded gradients: a rank sees only its shard's overflows, so the skip decision takes
  // the largest count over the ranks (set by the trainer when sharded).
  void set_count_over_ranks(std::function<double(double)> max_over_ranks) {
    max_over_ranks_ = std::move(max_over_ranks);
  }

  // The factor the loss gradient is multiplied by before backward.
  double loss_scale() const { return scaling_ ? scale_.scale() : 1.0; }
  // fp16 only (dynamic loss scaling); checkpoints save and restore its state.
  bool dynamic_scaling() const { return scaling_; }
  DynamicLossScale& scaler() { return scale_; }
  const DynamicLossScale& scaler() const { return scale_; }
  // fp16 overflows in a row that end a run as diverged: the scale is then 2^-48 of its start.
  static constexpr int64_t MAX_CONSECUTIVE_SKIPS = 64;
  // After backward and the gradient all-reduce: fills optimizer_grads().
  // Returns false when the step must be skipped (fp16 gradients that
  // overflowed); the loss scale is updated either way. UserError after
  // MAX_CONSECUTIVE_SKIPS skipped steps in a row: training diverged.
  bool unscale();
  // After the optimizer step: the model's parameters ← the master weights (the shard's range: the
  // trainer all-gathers the rest).
  void publish();

  int64_t skipped_steps() const { return scale_.skipped_steps(); }
  int64_t consecutive_skips() const { return scale_.consecutive_skips(); }

 private:
  Precision precision_;
  DType model_dtype_;
  bool scaling_ = false;  // fp16: dynamic loss scaling
  DynamicLossScale scale_;
  Tensor params_, grads_;              // the model's flat buffers
  Tensor params_shard_, grads_shard_;  // their range that this rank steps (all of them unsharded)
  Tensor master_, grads32_;            // fp32 copies of that range (16-bit runs only)
  std::function<double(double)> max_over_ranks_;
};

}  // namespace hpc::train
