// Device-side helpers for the .cu files (never included by host code):
// launch geometry, grid-stride loops and a deterministic block reduction.
//
// Every kernel here covers n elements with a grid-stride loop over 64-bit
// indices, so one launch shape serves any size and tensors past 2^31
// elements are indexed correctly. Reductions never use atomics on floating
// point: a block reduces with a fixed shuffle pattern and a fixed number of
// blocks writes partials that one block then adds in order, so the same
// input gives the same bits on every run (the CPU promises that too).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hpc::kernels {

constexpr int BLOCK = 256;             // threads per block for element-wise kernels
constexpr int64_t MAX_GRID = 1 << 16;  // blocks; grid-stride loops cover the rest

inline unsigned grid_for(int64_t n, int block = BLOCK) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > MAX_GRID ? MAX_GRID : blocks));
}

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Sum of v over the block, valid in thread 0. blockDim.x must be a multiple
// of 32 and at most 1024; `shared` holds 32 values. Deterministic: the
// shuffle tree and the order of warps are fixed.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = threadIdx.x < warps ? shared[threadIdx.x] : T(0);
  if (warp == 0)
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  __syncthreads();  // `shared` may be reused by the caller's next reduction
  return v;
}

}  // namespace hpc::kernels

namespace hpc::kernels {

// Block (c, split) of a per-channel reduction (see reduce.cuh): adds
// term(element_index, c, acc) over its slice of channel c into K running
// double sums and writes them to partials[(k·channels + c)·splits + split].
// Launch with grid (channels, splits) and BLOCK threads.
template <int K, typename Term>
__global__ void channel_partials_kernel(Term term, int64_t rows, int64_t channels, int64_t spatial,
                                        double* partials) {
  __shared__ double shared[32];
  const int64_t c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int64_t count = rows * spatial;
  const int64_t per_split = (count + splits - 1) / splits;
  const int64_t begin = split * per_split;
  const int64_t end = begin + per_split < count ? begin + per_split : count;
  double acc[K] = {};
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x)
    term(((e / spatial) * channels + c) * spatial + e % spatial, c, acc);
  for (int k = 0; k < K; ++k) {
    const double s = block_sum(acc[k], shared);
    if (threadIdx.x == 0) partials[(k * channels + c) * splits + split] = s;
  }
}

// The sum of quantity k of channel c from the partials, in split order.
__device__ __forceinline__ double channel_total(const double* partials, int k, int64_t c, int64_t channels,
                                                int64_t splits) {
  double s = 0;
  for (int64_t j = 0; j < splits; ++j) s += partials[(k * channels + c) * splits + j];
  return s;
}

}  // namespace hpc::kernels
