// Reductions: whole-tensor sums (Σx, Σx² for gradient norms), per-channel
// sums (bias gradients; batch norm uses the same engine) and a count of
// non-finite elements. Launchers only; kernels in reduce.cu.
//
// All sums accumulate in double and are deterministic: a fixed number of
// blocks writes partial sums (into caller-provided device memory of the size
// the *_partials functions give) and one more pass adds them in order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"

namespace hpc::kernels {

// ---- whole tensor ---------------------------------------------------------------

// Doubles of partials reduce_sum() needs for n elements.
int64_t sum_partials(int64_t n);
// *out (device) = Σ x[i] (or Σ x[i]² when squares), in double.
template <typename T>
void reduce_sum(const T* x, int64_t n, bool squares, double* partials, double* out, cudaStream_t stream);

// *count (device) += the number of elements of x that are inf or NaN.
template <typename T>
void count_nonfinite(const T* x, int64_t n, unsigned long long* count, cudaStream_t stream);

// ---- per channel ------------------------------------------------------------------
// x is viewed as [rows, channels, spatial]; channel c's elements are
// (r·channels + c)·spatial + s. Each channel is split into `splits` slices
// reduced by one block each, enough blocks to fill the GPU even for few channels.

inline int64_t channel_splits(int64_t per_channel, int64_t channels) {
  const int64_t by_size = (per_channel + 2047) / 2048;     // ≥ 2048 elements per block
  int64_t by_grid = 1024 / (channels > 0 ? channels : 1);  // ≈ 1024 blocks in all
  if (by_grid < 1) by_grid = 1;
  int64_t s = by_size < by_grid ? by_size : by_grid;
  return s < 1 ? 1 : (s > 256 ? 256 : s);
}
// Doubles of partials a per-channel reduction of `values` quantities needs.
inline int64_t channel_partials(int64_t rows, int64_t channels, int64_t spatial, int values) {
  return values * channels * channel_splits(rows * spatial, channels);
}

// dbias[c] += Σ_{r,s} dy[r, c, s], summed in double and rounded once before the add.
template <typename T>
void bias_grad(const T* dy, T* dbias, int64_t rows, int64_t channels, int64_t spatial, double* partials,
               cudaStream_t stream);

}  // namespace hpc::kernels
