// Optimizers over the model's flat parameter and gradient buffers.
//
// An optimizer owns its state buffers (SGD momentum; Adam exp_avg and
// exp_avg_sq), each one flat tensor with the layout of the parameter buffer,
// so one step is a few fused backend::optim_update calls (one per run of
// elements sharing a weight-decay setting) and a checkpoint stores each state
// buffer as one dataset. The update rules follow torch.optim (see
// kernels/optim_math.h), so recipes from PyTorch papers carry over unchanged.
//
// Weight decay applies only inside the caller's decay ranges: biases and
// normalisation parameters get none (nn::ParamInfo::weight_decay).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "config/config.h"
#include "core/tensor.h"
#include "nn/model.h"

namespace hpc::optim {

// Elements [offset, offset + count) of the flat buffers that get weight decay.
struct DecayRange {
  int64_t offset = 0, count = 0;
};

// The decay ranges of a model: every parameter whose ParamInfo says weight_decay.
std::vector<DecayRange> decay_ranges_of(const std::vector<nn::ParamInfo>& params);

// The ranges that fall in [lo, hi), relative to lo: an optimizer over one ZeRO shard of the flat
// buffers (created on that slice) decays exactly the elements the whole-buffer one would.
std::vector<DecayRange> decay_ranges_in(const std::vector<DecayRange>& ranges, int64_t lo, int64_t hi);

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // cfg.name: sgd | adam | adamw (anything else, or an invalid hyper-parameter,
  // is a UserError naming the option). params fixes the size, dtype and device
  // of the state; decay_ranges may come in any order but must not overlap.
  static std::unique_ptr<Optimizer> create(const OptimConfig& cfg, const Tensor& params,
                                           std::vector<DecayRange> decay_ranges);

  // One optimizer step at learning rate lr: updates params (and the state) in place from grads.
  virtual void step(const Tensor& params, const Tensor& grads, double lr) = 0;

  // Named state buffers, each the size of the flat buffer: "momentum" (SGD with
  // momentum > 0), "exp_avg" and "exp_avg_sq" (Adam, AdamW). The tensors alias
  // the optimizer's own buffers: a checkpoint reads them to save, and restores
  // by copying into them (plus set_steps_taken), which round-trips bit-exactly.
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;

  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps);

 protected:
  int64_t steps_taken_ = 0;
};

// Global L2 norm of grads, accumulated in double. If max_norm > 0 and the norm
// exceeds it, scales grads by max_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_).
// Returns the norm before clipping. A non-finite norm leaves grads untouched:
// scaling would turn every gradient into NaN or zero and hide where the problem
// was, so the caller decides (skip the step, abort) from the returned value.
double clip_grad_norm(const Tensor& grads, double max_norm);
// The clipping half of it, from a norm computed elsewhere (ZeRO: over every rank's shard).
void clip_to_norm(const Tensor& grads, double norm, double max_norm);

}  // namespace hpc::optim
