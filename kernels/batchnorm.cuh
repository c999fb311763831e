// Batch-normalisation kernels, in the pieces of backend/ops.def so that
// SyncBatchNorm can all-reduce the per-channel sums between them. Launchers
// only; kernels in batchnorm.cu, arithmetic in norm_math.h.
//
// x, y, dy, dx, gamma, beta are [rows, channels, spatial] / [channels] of
// storage type T; mean, invstd, running_* are of S = compute_t<T> (float for
// 16-bit activations, whose statistics would lose too much in 16 bits);
// stats (2C+1) and grad_sums (2C) are double, as on the CPU. Per-channel
// sums use the deterministic split reduction of reduce.cuh; `partials` is
// device scratch of channel_partials(rows, channels, spatial, 2) doubles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"

namespace hpc::kernels {

// stats = [Σx per channel | Σx² per channel | elements per channel].
template <typename T>
void bn_stats(const T* x, int64_t rows, int64_t channels, int64_t spatial, double* stats, double* partials,
              cudaStream_t stream);
// mean, invstd from stats; running statistics updated when running_mean is non-null.
template <typename S>
void bn_finalize(const double* stats, int64_t channels, double eps, double momentum, S* mean, S* invstd,
                 S* running_mean, S* running_var, cudaStream_t stream);
template <typename S>
void bn_running_inverse(const S* running_mean, const S* running_var, int64_t channels, double eps, S* mean,
                        S* invstd, cudaStream_t stream);
template <typename T>
void bn_normalize(const T* x, const compute_t<T>* mean, const compute_t<T>* invstd, const T* gamma,
                  const T* beta, T* y, int64_t rows, int64_t channels, int64_t spatial, cudaStream_t stream);
// grad_sums = [Σdy | Σdy·x̂]; dgamma += Σdy·x̂, dbeta += Σdy (local sums).
template <typename T>
void bn_backward_reduce(const T* x, const T* dy, const compute_t<T>* mean, const compute_t<T>* invstd,
                        int64_t rows, int64_t channels, int64_t spatial, double* grad_sums, T* dgamma,
                        T* dbeta, double* partials, cudaStream_t stream);
// dx from batch statistics (stats and grad_sums non-null) or running ones (both null).
// coeffs is device scratch of 3·channels compute_t<T>.
template <typename T>
void bn_backward_dx(const T* x, const T* dy, const compute_t<T>* mean, const compute_t<T>* invstd,
                    const T* gamma, const double* stats, const double* grad_sums, int64_t rows,
                    int64_t channels, int64_t spatial, T* dx, compute_t<T>* coeffs, cudaStream_t stream);

}  // namespace hpc::kernels
