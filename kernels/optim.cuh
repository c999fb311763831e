// Fused optimizer and mixed-precision kernels over the flat buffers.
// Launchers only; kernels in optim.cu, per-element rules in optim_math.h
// (the CPU backend's) and amp_math.h.
//
// The optimizer kernels update params, grads' range and the state buffers in
// ONE pass each (a step is a handful of launches for the whole model, one
// per run of elements sharing a weight-decay setting). They run in the
// optimizer's dtype: float (also the fp32 master weights of a bf16/fp16 run)
// or double (gradient checks).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"
#include "kernels/optim_math.h"

namespace hpc::kernels {

// buf is null for plain SGD (momentum 0).
template <typename T>
void sgd_update(T* params, const T* grads, T* buf, int64_t n, const SgdCoeffs<T>& c, cudaStream_t stream);
template <typename T>
void adam_update(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamCoeffs<T>& c,
                 cudaStream_t stream);

// out[i] = float(g[i])·inv_scale (out may alias g when G is float); *nonfinite
// (device) += number of elements whose result is inf or NaN.
template <typename G>
void unscale_grads(const G* g, float* out, int64_t n, float inv_scale, unsigned long long* nonfinite,
                   cudaStream_t stream);

}  // namespace hpc::kernels
