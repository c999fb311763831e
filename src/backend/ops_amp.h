// Mixed-precision ops: unscaling gradients into float32 with a non-finite
// check, and a plain non-finite count. The arithmetic is kernels/amp_math.h,
// shared by the CUDA kernels and the CPU loops of ops_amp.cpp.
//
// A bf16/fp16 run keeps fp32 master weights: backward writes 16-bit
// gradients (scaled by the loss scale S for fp16), unscale_grads turns them
// into the fp32 gradients the optimizer uses, and a non-zero count of
// non-finite values means the step must be skipped (train/mixed_precision.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hpc::backend {

// out (float32, same count and device as grads) = grads · inv_scale. Returns
// how many results are inf or NaN (0: the step may proceed).
int64_t unscale_grads(const Tensor& grads, const Tensor& out, double inv_scale);
// How many elements of x are inf or NaN.
int64_t count_nonfinite(const Tensor& x);

}  // namespace hpc::backend
