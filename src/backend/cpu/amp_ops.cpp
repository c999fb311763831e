// CPU mixed-precision ops (ops.def): plain loops over the same element
// functions the CUDA kernels call (kernels/amp_math.h). They serve float32
// and float64 tensors (the CPU has no 16-bit compute path) and let the CPU
// tests exercise the GPU's arithmetic.
#include "backend/dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/amp_math.h"

namespace hpc::backend::cpu {

int64_t unscale_grads(const Tensor& grads, const Tensor& out, double inv_scale) {
  HPC_ASSERT(out.dtype() == DType::F32 && out.count() == grads.count() && out.device() == grads.device(),
             "unscale_grads: out must be float32 of the gradients' count and device");
  return dispatch_float(grads.dtype(), "unscale_grads", [&]<typename T>() {
    const T* g = grads.data<T>();
    float* o = out.data<float>();
    const float inv = static_cast<float>(inv_scale);
    int64_t bad = 0;
    for (int64_t i = 0; i < grads.count(); ++i) {
      bool finite = true;
      o[i] = kernels::unscale_grad(static_cast<float>(g[i]), inv, finite);
      bad += finite ? 0 : 1;
    }
    return bad;
  });
}

int64_t count_nonfinite(const Tensor& x) {
  return dispatch_float(x.dtype(), "count_nonfinite", [&]<typename T>() {
    int64_t bad = 0;
    for (int64_t i = 0; i < x.count(); ++i) bad += kernels::is_finite_double(double(x.data<T>()[i])) ? 0 : 1;
    return bad;
  });
}

}  // namespace hpc::backend::cpu
