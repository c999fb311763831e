// Loss kernels: softmax cross-entropy with label smoothing (loss, gradient
// and top-1/top-5 hits in one pass over the logits) and squared error.
// Launchers only; kernels in loss.cu, per-row math in loss_math.h — the very
// functions the CPU backend calls, accumulating in double as it does.
//
// One block owns one row (sample): rows are independent, K is the number of
// classes (up to a 50k vocabulary), and the row's softmax needs its max, Σexp
// and the label's logit — the CPU's sequential loop split over the block's
// threads, in double, with fixed-order reductions. The per-row results are
// then added by one block in a fixed order (deterministic).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"

namespace hpc::kernels {

// Over the first n_valid rows of logits [·, k]: row_loss[r] (double) and,
// when dlogits is non-null, dlogits[r] = grad_scale·(softmax − target). A row
// whose label is outside [0, k) is skipped and counted as bad. Then
// totals[0..3] (device doubles) = {Σ loss, top-1 hits, top-5 hits (when
// count_top5), rows with a bad label}. row_loss and row_rank are device
// scratch of n_valid elements each.
template <typename T>
void softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t n_valid, int64_t k,
                           double smoothing, double grad_scale, bool count_top5, T* dlogits, double* row_loss,
                           int32_t* row_rank, double* totals, cudaStream_t stream);

// row_loss[r] = Σ_j (y − t)² over the first n_valid rows; dy (when non-null) = grad_scale·2·(y − t).
template <typename T>
void squared_error(const T* y, const T* target, int64_t n_valid, int64_t k, double grad_scale, T* dy,
                   double* row_loss, cudaStream_t stream);

}  // namespace hpc::kernels
