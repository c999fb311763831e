// Backend op for the fused optimizer update over the flat parameter buffer.
//
// One call updates elements [offset, offset + count) of the flat parameter
// buffer in place from the same range of the flat gradient buffer, together
// with that range of the optimizer's state buffers (all of one layout, see
// nn/model.h). The optimizer calls it once per run of elements that share a
// weight-decay setting, so a whole model step is a handful of calls instead of
// one per parameter tensor. The per-element rules are in kernels/optim_math.h.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hpc::backend {

enum class OptimRule { SGD, ADAM, ADAMW };

struct OptimHyper {
  OptimRule rule = OptimRule::SGD;
  double lr = 0;
  double weight_decay = 0;  // L2 (SGD, Adam) or decoupled (AdamW); applied only where decay = true
  double momentum = 0;      // SGD; 0 = plain SGD (no state buffer)
  bool nesterov = false;    // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  int64_t step = 1;                               // 1-based index of this step (Adam bias correction)
};

// state_a: SGD momentum buffer (undefined when momentum = 0) or Adam exp_avg;
// state_b: Adam exp_avg_sq (undefined for SGD). Every defined tensor has the
// dtype, device and element count of params.
void optim_update(const OptimHyper& hyper, bool decay, const Tensor& params, const Tensor& grads,
                  const Tensor& state_a, const Tensor& state_b, int64_t offset, int64_t count);

}  // namespace hpc::backend
