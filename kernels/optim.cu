// Fused optimizer and mixed-precision kernels (see optim.cuh).
#include "backend/cuda/check.h"
#include "kernels/amp_math.h"
#include "kernels/device_util.cuh"
#include "kernels/optim.cuh"

namespace hpc::kernels {

namespace {

// ---- kernels ------------------------------------------------------------------

template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, SgdCoeffs<T> c) {
  if (buf == nullptr) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) sgd_plain_update(p[i], g[i], c);
  } else {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) sgd_momentum_update(p[i], buf[i], g[i], c);
  }
}

template <typename T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, AdamCoeffs<T> c) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) adam_update(p[i], m[i], v[i], g[i], c);
}

template <typename G>
__global__ void unscale_kernel(const G* g, float* out, int64_t n, float inv_scale,
                               unsigned long long* nonfinite) {
  unsigned long long bad = 0;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    bool finite = true;
    out[i] = unscale_grad(static_cast<float>(g[i]), inv_scale, finite);
    bad += finite ? 0 : 1;
  }
  if (bad) atomicAdd(nonfinite, bad);  // an integer count: the same whatever the order
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

template <typename T>
void sgd_update(T* params, const T* grads, T* buf, int64_t n, const SgdCoeffs<T>& c, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), BLOCK, 0, stream>>>(params, grads, buf, n, c);
  cudaLaunchCheck();
}

template <typename T>
void adam_update(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamCoeffs<T>& c,
                 cudaStream_t stream) {
  if (n <= 0) return;
  adam_kernel<<<grid_for(n), BLOCK, 0, stream>>>(params, grads, exp_avg, exp_avg_sq, n, c);
  cudaLaunchCheck();
}

template <typename G>
void unscale_grads(const G* g, float* out, int64_t n, float inv_scale, unsigned long long* nonfinite,
                   cudaStream_t stream) {
  if (n <= 0) return;
  unscale_kernel<<<grid_for(n), BLOCK, 0, stream>>>(g, out, n, inv_scale, nonfinite);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------

template void sgd_update<float>(float*, const float*, float*, int64_t, const SgdCoeffs<float>&, cudaStream_t);
template void sgd_update<double>(double*, const double*, double*, int64_t, const SgdCoeffs<double>&,
                                 cudaStream_t);
template void adam_update<float>(float*, const float*, float*, float*, int64_t, const AdamCoeffs<float>&,
                                 cudaStream_t);
template void adam_update<double>(double*, const double*, double*, double*, int64_t,
                                  const AdamCoeffs<double>&, cudaStream_t);
template void unscale_grads<float>(const float*, float*, int64_t, float, unsigned long long*, cudaStream_t);
template void unscale_grads<Bf16>(const Bf16*, float*, int64_t, float, unsigned long long*, cudaStream_t);
template void unscale_grads<Half>(const Half*, float*, int64_t, float, unsigned long long*, cudaStream_t);

}  // namespace hpc::kernels
