// CPU optimizer update: one plain loop per rule over the range, calling the
// element functions of kernels/optim_math.h (the same ones the CUDA kernels
// call). The coefficients are built once per call, outside the loop, so the
// loop body is pure T arithmetic and vectorises at -O3. Adam's loop is the
// kernel table's (isa/kernel_table.h), where it has an AVX-512 body.
#include "backend/ops_impl.h"

#include "backend/cpu/isa/kernel_table.h"
#include "backend/dispatch.h"
#include "core/error.h"
#include "kernels/optim_math.h"

namespace hpc::backend::cpu {

namespace {

void check_operand(const Tensor& t, const Tensor& params, const char* what) {
  HPC_ASSERT(t.defined(), std::string("optim_update: missing ") + what);
  HPC_ASSERT(t.dtype() == params.dtype() && t.device() == params.device() && t.count() == params.count(),
             std::string("optim_update: ") + what + " " + t.shape().str() + " " + dtype_name(t.dtype()) +
                 " does not match params " + params.shape().str() + " " + dtype_name(params.dtype()));
}

}  // namespace

void optim_update(const OptimHyper& h, bool decay, const Tensor& params, const Tensor& grads,
                  const Tensor& state_a, const Tensor& state_b, int64_t offset, int64_t count) {
  HPC_ASSERT(offset >= 0 && count >= 0 && offset + count <= params.count(),
             "optim_update: range out of bounds");
  check_operand(grads, params, "grads");
  const bool sgd = h.rule == OptimRule::SGD;
  const bool uses_a = !sgd || h.momentum != 0;
  if (uses_a) check_operand(state_a, params, sgd ? "momentum buffer" : "exp_avg");
  if (!sgd) check_operand(state_b, params, "exp_avg_sq");
  HPC_ASSERT(sgd || h.step >= 1, "optim_update: Adam step must be ≥ 1");
  const double wd = decay ? h.weight_decay : 0.0;

  dispatch_float(params.dtype(), "optim_update", [&]<typename T>() {
    T* p = params.data<T>() + offset;
    const T* g = grads.data<T>() + offset;
    if (sgd) {
      const auto c = kernels::make_sgd_coeffs<T>(h.lr, h.momentum, h.nesterov, wd);
      if (!uses_a) {  // SGD without momentum: no momentum buffer
        for (int64_t i = 0; i < count; ++i) kernels::sgd_plain_update(p[i], g[i], c);
      } else {
        T* a = state_a.data<T>() + offset;
        for (int64_t i = 0; i < count; ++i) kernels::sgd_momentum_update(p[i], a[i], g[i], c);
      }
      return;
    }
    T* a = state_a.data<T>() + offset;
    T* b = state_b.data<T>() + offset;
    const auto c =
        kernels::make_adam_coeffs<T>(h.lr, h.beta1, h.beta2, h.eps, wd, h.rule == OptimRule::ADAMW, h.step);
    kernel_table<T>().adam(p, a, b, g, count, c);
  });
}

}  // namespace hpc::backend::cpu
