// Llama-piece kernels (see llama.cuh): RMSNorm rows one warp per row, its
// weight gradient as column partials over row splits, and grid-stride
// element loops for rotary pairs and the SwiGLU gate. The arithmetic is
// llama_math.h's, which test_kernels_emulated runs on the CPU.
#include "backend/cuda/check.h"
#include "core/error.h"
#include "kernels/device_util.cuh"
#include "kernels/llama.cuh"
#include "kernels/llama_math.h"

namespace hpc::kernels {

namespace {

constexpr int WARPS_PER_BLOCK = BLOCK / WARP;

__device__ __forceinline__ int64_t warp_index() {
  return static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / WARP;
}
__device__ __forceinline__ int64_t warp_stride() { return static_cast<int64_t>(gridDim.x) * WARPS_PER_BLOCK; }

template <typename V>
__device__ V warp_sum(V v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

unsigned grid_for_rows(int64_t rows) { return grid_for(rows, WARPS_PER_BLOCK); }

template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* w, double eps, T* y, T* rstd, int64_t rows,
                                       int64_t width) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % WARP);
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const T* in = x + r * width;
    const double rs = rms_rstd(warp_sum(rms_lane_sum_sq(in, width, lane)), width, eps);
    rms_lane_normalize(in, w, width, lane, static_cast<C>(rs), y + r * width);
    if (lane == 0) rstd[r] = T(rs);
  }
}

template <typename T>
__global__ void rmsnorm_dx_kernel(const T* x, const T* dy, const T* w, const T* rstd, T* dx, bool accumulate,
                                  int64_t rows, int64_t width) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % WARP);
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const T* in = x + r * width;
    const T* d = dy + r * width;
    const C rs = C(rstd[r]);
    const double dot = warp_sum(rms_lane_grad_sum(in, d, w, width, lane, rs));
    rms_lane_dx(in, d, w, width, lane, rs, static_cast<C>(dot / static_cast<double>(width)), accumulate,
                dx + r * width);
  }
}

template <typename T>
__global__ void rmsnorm_param_partials_kernel(const T* x, const T* dy, const T* rstd, double* partials,
                                              int64_t rows, int64_t width) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t split = blockIdx.y, splits = gridDim.y;
  if (j >= width) return;
  const int64_t per = (rows + splits - 1) / splits;
  const int64_t begin = split * per, end = begin + per < rows ? begin + per : rows;
  partials[split * width + j] = begin < end ? rms_param_partial(x, dy, rstd, width, j, begin, end) : 0.0;
}

template <typename T>
__global__ void rmsnorm_param_finish_kernel(const double* partials, T* dweight, int64_t splits,
                                            int64_t width) {
  for (int64_t j = thread_index(); j < width; j += grid_stride()) {
    double s = static_cast<double>(dweight[j]);
    for (int64_t k = 0; k < splits; ++k) s += partials[k * width + j];
    dweight[j] = T(s);
  }
}

template <typename T>
__global__ void rotary_kernel(T* qkv, int64_t pairs, int64_t heads, int64_t kv_heads, int64_t d,
                              int64_t t_len, const T* cos_table, const T* sin_table, bool interleaved,
                              bool inverse) {
  for (int64_t e = thread_index(); e < pairs; e += grid_stride())
    rotary_element(qkv, e, heads, kv_heads, d, t_len, cos_table, sin_table, interleaved, inverse);
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* gate_up, T* out, int64_t n, int64_t f) {
  for (int64_t e = thread_index(); e < n; e += grid_stride()) swiglu_forward_element(gate_up, out, e, f);
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* gate_up, const T* dout, T* dgate_up, int64_t n, int64_t f) {
  for (int64_t e = thread_index(); e < n; e += grid_stride())
    swiglu_backward_element(gate_up, dout, dgate_up, e, f);
}

}  // namespace

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, double eps, T* y, T* rstd, int64_t rows, int64_t width,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_forward_kernel<<<grid_for_rows(rows), BLOCK, 0, stream>>>(x, weight, eps, y, rstd, rows, width);
  cudaLaunchCheck();
}

template <typename T>
void rmsnorm_backward(const T* x, const T* dy, const T* weight, const T* rstd, T* dx, bool accumulate,
                      T* dweight, double* partials, int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows <= 0) return;
  if (dx != nullptr) {
    rmsnorm_dx_kernel<<<grid_for_rows(rows), BLOCK, 0, stream>>>(x, dy, weight, rstd, dx, accumulate, rows,
                                                                 width);
    cudaLaunchCheck();
  }
  const int64_t splits = layernorm_param_splits(rows);
  const dim3 grid(static_cast<unsigned>((width + BLOCK - 1) / BLOCK), static_cast<unsigned>(splits));
  rmsnorm_param_partials_kernel<<<grid, BLOCK, 0, stream>>>(x, dy, rstd, partials, rows, width);
  cudaLaunchCheck();
  rmsnorm_param_finish_kernel<<<grid_for(width), BLOCK, 0, stream>>>(partials, dweight, splits, width);
  cudaLaunchCheck();
}

template <typename T>
void rotary_apply(T* qkv, int64_t rows, int64_t t_len, int64_t heads, int64_t kv_heads, int64_t d,
                  const T* cos_table, const T* sin_table, bool interleaved, bool inverse,
                  cudaStream_t stream) {
  const int64_t pairs = rows * (heads + kv_heads) * (d / 2);
  if (pairs <= 0) return;
  rotary_kernel<<<grid_for(pairs), BLOCK, 0, stream>>>(qkv, pairs, heads, kv_heads, d, t_len, cos_table,
                                                       sin_table, interleaved, inverse);
  cudaLaunchCheck();
}

template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows * f <= 0) return;
  swiglu_forward_kernel<<<grid_for(rows * f), BLOCK, 0, stream>>>(gate_up, out, rows * f, f);
  cudaLaunchCheck();
}

template <typename T>
void swiglu_backward(const T* gate_up, const T* dout, T* dgate_up, int64_t rows, int64_t f,
                     cudaStream_t stream) {
  if (rows * f <= 0) return;
  swiglu_backward_kernel<<<grid_for(rows * f), BLOCK, 0, stream>>>(gate_up, dout, dgate_up, rows * f, f);
  cudaLaunchCheck();
}

#define HPC_LLAMA(T)                                                                                        \
  template void rmsnorm_forward<T>(const T*, const T*, double, T*, T*, int64_t, int64_t, cudaStream_t);     \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, T*, bool, T*, double*, int64_t, \
                                    int64_t, cudaStream_t);                                                 \
  template void rotary_apply<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, const T*, const T*, bool,  \
                                bool, cudaStream_t);                                                        \
  template void swiglu_forward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);                            \
  template void swiglu_backward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);
HPC_LLAMA(float)
HPC_LLAMA(double)
HPC_LLAMA(Bf16)
HPC_LLAMA(Half)
#undef HPC_LLAMA

}  // namespace hpc::kernels
