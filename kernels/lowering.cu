// Convolution lowering and pooling kernels (see lowering.cuh): one thread
// per output element, calling the shared body of conv_math.h / pool_math.h.
#include "backend/cuda/check.h"
#include "kernels/device_util.cuh"
#include "kernels/lowering.cuh"

namespace hpc::kernels {

namespace {

// ---- kernels ------------------------------------------------------------------

template <typename T>
__global__ void im2col_kernel(const T* x, T* cols, ConvShape g, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) cols[i] = im2col_element(x, g, i);
}

template <typename T>
__global__ void col2im_kernel(const T* cols, T* dx, ConvShape g, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) dx[i] = col2im_element(cols, g, i);
}

template <typename T>
__global__ void swap_kernel(const T* src, T* dst, int64_t a, int64_t b, int64_t inner, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) dst[i] = src[swap_source_index(i, a, b, inner)];
}

template <typename T>
__global__ void max_pool_forward_kernel(const T* x, T* y, int32_t* argmax, PoolShape g, int64_t n) {
  for (int64_t o = thread_index(); o < n; o += grid_stride()) max_pool_element(x, g, o, y[o], argmax[o]);
}

template <typename T>
__global__ void max_pool_backward_kernel(const T* dy, const int32_t* argmax, T* dx, PoolShape g, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_stride())
    dx[i] = max_pool_backward_element(dy, argmax, g, i);
}

template <typename T>
__global__ void avg_pool_forward_kernel(const T* x, T* y, PoolShape g, int64_t n) {
  for (int64_t o = thread_index(); o < n; o += grid_stride()) y[o] = avg_pool_element(x, g, o);
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* dy, T* dx, PoolShape g, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) dx[i] = avg_pool_backward_element(dy, g, i);
}

template <typename T>
__global__ void spatial_mean_forward_kernel(const T* x, T* y, int64_t rows, int64_t spatial) {
  for (int64_t r = thread_index(); r < rows; r += grid_stride())
    y[r] = spatial_mean_row(x + r * spatial, spatial);
}

template <typename T>
__global__ void spatial_mean_backward_kernel(const T* dy, T* dx, int64_t rows, int64_t spatial) {
  const int64_t n = rows * spatial;
  for (int64_t i = thread_index(); i < n; i += grid_stride())
    dx[i] = T(static_cast<double>(dy[i / spatial]) / static_cast<double>(spatial));
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

template <typename T>
void im2col(const T* x, T* cols, const ConvShape& g, cudaStream_t stream) {
  const int64_t n = g.col_count();
  if (n <= 0) return;
  im2col_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, cols, g, n);
  cudaLaunchCheck();
}

template <typename T>
void col2im(const T* cols, T* dx, const ConvShape& g, cudaStream_t stream) {
  const int64_t n = g.in_count();
  if (n <= 0) return;
  col2im_kernel<<<grid_for(n), BLOCK, 0, stream>>>(cols, dx, g, n);
  cudaLaunchCheck();
}

template <typename T>
void swap_leading_dims(const T* src, T* dst, int64_t a, int64_t b, int64_t inner, cudaStream_t stream) {
  const int64_t n = a * b * inner;
  if (n <= 0) return;
  swap_kernel<<<grid_for(n), BLOCK, 0, stream>>>(src, dst, a, b, inner, n);
  cudaLaunchCheck();
}

template <typename T>
void max_pool_forward(const T* x, T* y, int32_t* argmax, const PoolShape& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.out_pixels();
  if (n <= 0) return;
  max_pool_forward_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, y, argmax, g, n);
  cudaLaunchCheck();
}

template <typename T>
void max_pool_backward(const T* dy, const int32_t* argmax, T* dx, const PoolShape& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.in_pixels();
  if (n <= 0) return;
  max_pool_backward_kernel<<<grid_for(n), BLOCK, 0, stream>>>(dy, argmax, dx, g, n);
  cudaLaunchCheck();
}

template <typename T>
void avg_pool_forward(const T* x, T* y, const PoolShape& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.out_pixels();
  if (n <= 0) return;
  avg_pool_forward_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, y, g, n);
  cudaLaunchCheck();
}

template <typename T>
void avg_pool_backward(const T* dy, T* dx, const PoolShape& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.in_pixels();
  if (n <= 0) return;
  avg_pool_backward_kernel<<<grid_for(n), BLOCK, 0, stream>>>(dy, dx, g, n);
  cudaLaunchCheck();
}

template <typename T>
void spatial_mean_forward(const T* x, T* y, int64_t rows, int64_t spatial, cudaStream_t stream) {
  if (rows <= 0) return;
  spatial_mean_forward_kernel<<<grid_for(rows), BLOCK, 0, stream>>>(x, y, rows, spatial);
  cudaLaunchCheck();
}

template <typename T>
void spatial_mean_backward(const T* dy, T* dx, int64_t rows, int64_t spatial, cudaStream_t stream) {
  if (rows <= 0) return;
  spatial_mean_backward_kernel<<<grid_for(rows * spatial), BLOCK, 0, stream>>>(dy, dx, rows, spatial);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------

#define HPC_LOWERING(T)                                                                             \
  template void im2col<T>(const T*, T*, const ConvShape&, cudaStream_t);                            \
  template void col2im<T>(const T*, T*, const ConvShape&, cudaStream_t);                            \
  template void swap_leading_dims<T>(const T*, T*, int64_t, int64_t, int64_t, cudaStream_t);        \
  template void max_pool_forward<T>(const T*, T*, int32_t*, const PoolShape&, cudaStream_t);        \
  template void max_pool_backward<T>(const T*, const int32_t*, T*, const PoolShape&, cudaStream_t); \
  template void avg_pool_forward<T>(const T*, T*, const PoolShape&, cudaStream_t);                  \
  template void avg_pool_backward<T>(const T*, T*, const PoolShape&, cudaStream_t);                 \
  template void spatial_mean_forward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);              \
  template void spatial_mean_backward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);
HPC_LOWERING(float)
HPC_LOWERING(double)
HPC_LOWERING(Bf16)
HPC_LOWERING(Half)
#undef HPC_LOWERING

}  // namespace hpc::kernels
