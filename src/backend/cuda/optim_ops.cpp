// CUDA optimizer and mixed-precision ops (ops.def). The per-step
// coefficients are built on the host exactly as the CPU backend builds them
// (optim_math.h); the kernels apply the same element rules.
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/optim.cuh"
#include "kernels/reduce.cuh"

namespace hpc::backend::cuda {

namespace {

void check_operand(const Tensor& t, const Tensor& params, const char* what) {
  HPC_ASSERT(t.defined(), std::string("optim_update: missing ") + what);
  HPC_ASSERT(t.dtype() == params.dtype() && t.device() == params.device() && t.count() == params.count(),
             std::string("optim_update: ") + what + " " + t.shape().str() + " " + dtype_name(t.dtype()) +
                 " does not match params " + params.shape().str() + " " + dtype_name(params.dtype()));
}

// Zeroes a device counter, runs `launch` with it, and returns its value.
template <typename Launch>
int64_t count_on_device(Launch launch) {
  Context& ctx = Context::get();
  auto* counter = static_cast<unsigned long long*>(ctx.scratch(sizeof(unsigned long long)));
  cudaCheck(cudaMemsetAsync(counter, 0, sizeof *counter, ctx.compute()));
  launch(counter, ctx.compute());
  return static_cast<int64_t>(
      *static_cast<const unsigned long long*>(ctx.read_back(counter, sizeof *counter)));
}

}  // namespace

void optim_update(const OptimHyper& h, bool decay, const Tensor& params, const Tensor& grads,
                  const Tensor& state_a, const Tensor& state_b, int64_t offset, int64_t count) {
  require_device("optim_update", {&params, &grads, &state_a, &state_b});
  HPC_ASSERT(offset >= 0 && count >= 0 && offset + count <= params.count(),
             "optim_update: range out of bounds");
  check_operand(grads, params, "grads");
  const bool sgd = h.rule == OptimRule::SGD;
  const bool uses_a = !sgd || h.momentum != 0;
  if (uses_a) check_operand(state_a, params, sgd ? "momentum buffer" : "exp_avg");
  if (!sgd) check_operand(state_b, params, "exp_avg_sq");
  HPC_ASSERT(sgd || h.step >= 1, "optim_update: Adam step must be ≥ 1");
  HPC_ASSERT(
      params.dtype() == DType::F32 || params.dtype() == DType::F64,
      std::string("optim_update: parameters must be float32 or float64 (the fp32 master weights in mixed "
                  "precision), not ") +
          dtype_name(params.dtype()));
  const double wd = decay ? h.weight_decay : 0.0;
  cudaStream_t s = Context::get().compute();
  dispatch_storage(params.dtype(), "optim_update", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* p = params.data<T>() + offset;
      const T* g = grads.data<T>() + offset;
      T* a = uses_a ? state_a.data<T>() + offset : nullptr;
      if (sgd) {
        kernels::sgd_update(p, g, a, count, kernels::make_sgd_coeffs<T>(h.lr, h.momentum, h.nesterov, wd), s);
        return;
      }
      const auto c =
          kernels::make_adam_coeffs<T>(h.lr, h.beta1, h.beta2, h.eps, wd, h.rule == OptimRule::ADAMW, h.step);
      kernels::adam_update(p, g, a, state_b.data<T>() + offset, count, c, s);
    }
  });
}

int64_t unscale_grads(const Tensor& grads, const Tensor& out, double inv_scale) {
  require_device("unscale_grads", {&grads, &out});
  HPC_ASSERT(out.dtype() == DType::F32 && out.count() == grads.count() && out.device() == grads.device(),
             "unscale_grads: out must be float32 of the gradients' count and device");
  return count_on_device([&](unsigned long long* counter, cudaStream_t s) {
    dispatch_storage(grads.dtype(), "unscale_grads", [&]<typename G>() {
      if constexpr (std::is_same_v<G, double>)
        HPC_ASSERT(false, "unscale_grads: float64 gradients need no mixed-precision unscaling");
      else
        kernels::unscale_grads(grads.data<G>(), out.data<float>(), grads.count(),
                               static_cast<float>(inv_scale), counter, s);
    });
  });
}

int64_t count_nonfinite(const Tensor& x) {
  require_device("count_nonfinite", {&x});
  return count_on_device([&](unsigned long long* counter, cudaStream_t s) {
    dispatch_storage(x.dtype(), "count_nonfinite",
                     [&]<typename T>() { kernels::count_nonfinite(x.data<T>(), x.count(), counter, s); });
  });
}

}  // namespace hpc::backend::cuda
