// Element-wise kernels (see elementwise.cuh).
//
// Each op is one grid-stride kernel whose body is a call of the shared
// per-element function; the activation is chosen once per launch (a
// template parameter), never per element.
#include "backend/cuda/check.h"
#include "kernels/activation_math.h"
#include "kernels/device_util.cuh"
#include "kernels/dropout_math.h"
#include "kernels/elementwise.cuh"

namespace hpc::kernels {

namespace {

// ---- kernels ------------------------------------------------------------------

template <typename T>
__global__ void fill_kernel(T* x, int64_t n, T value) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) x[i] = value;
}

template <typename T>
__global__ void axpy_kernel(compute_t<T> alpha, const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) y[i] = T(C(y[i]) + alpha * C(x[i]));
}

template <typename T>
__global__ void scale_kernel(T* x, int64_t n, compute_t<T> alpha) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) x[i] = T(C(x[i]) * alpha);
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) out[i] = T(C(a[i]) + C(b[i]));
}

template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  // Through double: exact for every source type, so there is one rounding, into D.
  for (int64_t i = thread_index(); i < n; i += grid_stride()) dst[i] = D(static_cast<double>(src[i]));
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t n, int64_t channels, int64_t spatial) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride())
    y[i] = T(C(y[i]) + C(bias[(i / spatial) % channels]));
}

template <ActivationKind A, typename T>
__global__ void activation_forward_kernel(const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const C v = C(x[i]);
    if constexpr (A == ActivationKind::Relu)
      y[i] = T(relu_forward(v));
    else if constexpr (A == ActivationKind::Gelu)
      y[i] = T(gelu_forward(v));
    else
      y[i] = T(tanh_forward(v));
  }
}

template <ActivationKind A, typename T>
__global__ void activation_backward_kernel(const T* in, const T* dy, T* dx, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const C v = C(in[i]), g = C(dy[i]);
    if constexpr (A == ActivationKind::Relu)
      dx[i] = T(relu_backward(v, g));
    else if constexpr (A == ActivationKind::Gelu)
      dx[i] = T(gelu_backward(v, g));
    else
      dx[i] = T(tanh_backward(v, g));
  }
}

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, double p, compute_t<T> keep_scale, uint64_t seed,
                               uint64_t stream_id, uint64_t offset) {
  using C = compute_t<T>;
  for (int64_t i = thread_index(); i < n; i += grid_stride())
    y[i] = T(dropout_element(C(x[i]), p, keep_scale, seed, stream_id, offset + static_cast<uint64_t>(i)));
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

template <typename T>
void fill(T* x, int64_t n, double value, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, n, T(value));
  cudaLaunchCheck();
}

template <typename T>
void axpy(double alpha, const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  axpy_kernel<<<grid_for(n), BLOCK, 0, stream>>>(static_cast<compute_t<T>>(alpha), x, y, n);
  cudaLaunchCheck();
}

template <typename T>
void scale(T* x, int64_t n, double alpha, cudaStream_t stream) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, n, static_cast<compute_t<T>>(alpha));
  cudaLaunchCheck();
}

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n), BLOCK, 0, stream>>>(a, b, out, n);
  cudaLaunchCheck();
}

template <typename S, typename D>
void convert(const S* src, D* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  convert_kernel<<<grid_for(n), BLOCK, 0, stream>>>(src, dst, n);
  cudaLaunchCheck();
}

template <typename T>
void add_bias(T* y, const T* bias, int64_t n, int64_t channels, int64_t spatial, cudaStream_t stream) {
  if (n <= 0) return;
  add_bias_kernel<<<grid_for(n), BLOCK, 0, stream>>>(y, bias, n, channels, spatial);
  cudaLaunchCheck();
}

template <typename T>
void activation_forward(ActivationKind act, const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  switch (act) {
    case ActivationKind::Relu:
      activation_forward_kernel<ActivationKind::Relu><<<grid_for(n), BLOCK, 0, stream>>>(x, y, n);
      break;
    case ActivationKind::Gelu:
      activation_forward_kernel<ActivationKind::Gelu><<<grid_for(n), BLOCK, 0, stream>>>(x, y, n);
      break;
    case ActivationKind::Tanh:
      activation_forward_kernel<ActivationKind::Tanh><<<grid_for(n), BLOCK, 0, stream>>>(x, y, n);
      break;
  }
  cudaLaunchCheck();
}

template <typename T>
void activation_backward(ActivationKind act, const T* in, const T* dy, T* dx, int64_t n,
                         cudaStream_t stream) {
  if (n <= 0) return;
  switch (act) {
    case ActivationKind::Relu:
      activation_backward_kernel<ActivationKind::Relu><<<grid_for(n), BLOCK, 0, stream>>>(in, dy, dx, n);
      break;
    case ActivationKind::Gelu:
      activation_backward_kernel<ActivationKind::Gelu><<<grid_for(n), BLOCK, 0, stream>>>(in, dy, dx, n);
      break;
    case ActivationKind::Tanh:
      activation_backward_kernel<ActivationKind::Tanh><<<grid_for(n), BLOCK, 0, stream>>>(in, dy, dx, n);
      break;
  }
  cudaLaunchCheck();
}

template <typename T>
void dropout(const T* x, T* y, int64_t n, double p, uint64_t seed, uint64_t stream_id, uint64_t offset,
             cudaStream_t stream) {
  if (n <= 0) return;
  const auto keep_scale = static_cast<compute_t<T>>(1.0 / (1.0 - p));
  dropout_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, y, n, p, keep_scale, seed, stream_id, offset);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------

#define HPC_ELEMENTWISE(T)                                                                             \
  template void fill<T>(T*, int64_t, double, cudaStream_t);                                            \
  template void axpy<T>(double, const T*, T*, int64_t, cudaStream_t);                                  \
  template void scale<T>(T*, int64_t, double, cudaStream_t);                                           \
  template void add<T>(const T*, const T*, T*, int64_t, cudaStream_t);                                 \
  template void add_bias<T>(T*, const T*, int64_t, int64_t, int64_t, cudaStream_t);                    \
  template void activation_forward<T>(ActivationKind, const T*, T*, int64_t, cudaStream_t);            \
  template void activation_backward<T>(ActivationKind, const T*, const T*, T*, int64_t, cudaStream_t); \
  template void dropout<T>(const T*, T*, int64_t, double, uint64_t, uint64_t, uint64_t, cudaStream_t); \
  template void convert<T, float>(const T*, float*, int64_t, cudaStream_t);                            \
  template void convert<T, double>(const T*, double*, int64_t, cudaStream_t);                          \
  template void convert<T, Bf16>(const T*, Bf16*, int64_t, cudaStream_t);                              \
  template void convert<T, Half>(const T*, Half*, int64_t, cudaStream_t);
HPC_ELEMENTWISE(float)
HPC_ELEMENTWISE(double)
HPC_ELEMENTWISE(Bf16)
HPC_ELEMENTWISE(Half)
#undef HPC_ELEMENTWISE

#define HPC_CONVERT_FROM(S)                                                   \
  template void convert<S, float>(const S*, float*, int64_t, cudaStream_t);   \
  template void convert<S, double>(const S*, double*, int64_t, cudaStream_t); \
  template void convert<S, Bf16>(const S*, Bf16*, int64_t, cudaStream_t);     \
  template void convert<S, Half>(const S*, Half*, int64_t, cudaStream_t);
HPC_CONVERT_FROM(uint8_t)
HPC_CONVERT_FROM(int32_t)
#undef HPC_CONVERT_FROM

}  // namespace hpc::kernels
