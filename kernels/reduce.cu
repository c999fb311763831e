// Reductions (see reduce.cuh).
#include "backend/cuda/check.h"
#include "kernels/device_util.cuh"
#include "kernels/reduce.cuh"

namespace hpc::kernels {

namespace {

constexpr int64_t SUM_BLOCKS = 1024;   // most partials a whole-tensor sum writes
constexpr int64_t SUM_PER_THREAD = 8;  // elements per thread before another block is worth it

// ---- kernels ------------------------------------------------------------------

template <typename T>
__global__ void sum_partials_kernel(const T* x, int64_t n, bool squares, double* partials) {
  __shared__ double shared[32];
  double acc = 0;
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const double v = static_cast<double>(x[i]);
    acc += squares ? v * v : v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block adds the partials (each thread a fixed strided subset, then the block tree).
__global__ void sum_finish_kernel(const double* partials, int64_t count, double* out) {
  __shared__ double shared[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = acc;
}

template <typename T>
__global__ void count_nonfinite_kernel(const T* x, int64_t n, unsigned long long* count) {
  unsigned long long mine = 0;
  for (int64_t i = thread_index(); i < n; i += grid_stride())
    mine += is_finite_double(static_cast<double>(x[i])) ? 0 : 1;
  // Integer addition commutes exactly, so an atomic keeps the result deterministic.
  if (mine) atomicAdd(count, mine);
}

template <typename T>
struct BiasTerm {
  const T* dy;
  __device__ void operator()(int64_t i, int64_t, double* acc) const { acc[0] += static_cast<double>(dy[i]); }
};

template <typename T>
__global__ void bias_grad_finish_kernel(const double* partials, T* dbias, int64_t channels, int64_t splits) {
  using C = compute_t<T>;
  for (int64_t c = thread_index(); c < channels; c += grid_stride())
    dbias[c] = T(C(dbias[c]) + C(channel_total(partials, 0, c, channels, splits)));
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

int64_t sum_partials(int64_t n) {
  const int64_t blocks = (n + BLOCK * SUM_PER_THREAD - 1) / (BLOCK * SUM_PER_THREAD);
  return blocks < 1 ? 1 : (blocks > SUM_BLOCKS ? SUM_BLOCKS : blocks);
}

template <typename T>
void reduce_sum(const T* x, int64_t n, bool squares, double* partials, double* out, cudaStream_t stream) {
  const int64_t blocks = sum_partials(n);
  sum_partials_kernel<<<static_cast<unsigned>(blocks), BLOCK, 0, stream>>>(x, n, squares, partials);
  cudaLaunchCheck();
  sum_finish_kernel<<<1, 1024, 0, stream>>>(partials, blocks, out);
  cudaLaunchCheck();
}

template <typename T>
void count_nonfinite(const T* x, int64_t n, unsigned long long* count, cudaStream_t stream) {
  if (n <= 0) return;
  count_nonfinite_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, n, count);
  cudaLaunchCheck();
}

template <typename T>
void bias_grad(const T* dy, T* dbias, int64_t rows, int64_t channels, int64_t spatial, double* partials,
               cudaStream_t stream) {
  if (channels <= 0) return;
  const int64_t splits = channel_splits(rows * spatial, channels);
  const dim3 grid(static_cast<unsigned>(channels), static_cast<unsigned>(splits));
  channel_partials_kernel<1><<<grid, BLOCK, 0, stream>>>(BiasTerm<T>{dy}, rows, channels, spatial, partials);
  cudaLaunchCheck();
  bias_grad_finish_kernel<<<grid_for(channels), BLOCK, 0, stream>>>(partials, dbias, channels, splits);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------

#define HPC_REDUCE(T)                                                                     \
  template void reduce_sum<T>(const T*, int64_t, bool, double*, double*, cudaStream_t);   \
  template void count_nonfinite<T>(const T*, int64_t, unsigned long long*, cudaStream_t); \
  template void bias_grad<T>(const T*, T*, int64_t, int64_t, int64_t, double*, cudaStream_t);
HPC_REDUCE(float)
HPC_REDUCE(double)
HPC_REDUCE(Bf16)
HPC_REDUCE(Half)
#undef HPC_REDUCE

}  // namespace hpc::kernels
