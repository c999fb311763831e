// Device dispatch for the optimizer update: CUDA tensors go to backend/cuda,
// the rest to backend/cpu.
#include "backend/ops_optim.h"

#include "backend/cpu/optim_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

void optim_update(const OptimHyper& hyper, bool decay, const Tensor& params, const Tensor& grads,
                  const Tensor& state_a, const Tensor& state_b, int64_t offset, int64_t count) {
  if (!on_cpu(params))
    return cuda::optim_update(hyper, decay, params, grads, state_a, state_b, offset, count);
  cpu::optim_update(hyper, decay, params, grads, state_a, state_b, offset, count);
}

}  // namespace hpc::backend
