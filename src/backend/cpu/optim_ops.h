// CPU implementation of the optimizer update (ops_optim.h). Same contract.
#pragma once

#include "backend/ops_optim.h"

namespace hpc::backend::cpu {

void optim_update(const OptimHyper& hyper, bool decay, const Tensor& params, const Tensor& grads,
                  const Tensor& state_a, const Tensor& state_b, int64_t offset, int64_t count);

}  // namespace hpc::backend::cpu
