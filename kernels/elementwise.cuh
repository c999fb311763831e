// Element-wise kernels: fill, axpy, scale, add, dtype conversion, bias add,
// activations and dropout. Launchers only (host-includable); the kernels are
// in elementwise.cu.
//
// T is a storage type: float, double, kernels::Bf16 or kernels::Half. The
// arithmetic is done in compute_t<T> (double for double, float otherwise)
// and rounded once on store, through the same per-element functions the CPU
// backend calls (activation_math.h, random.h). Every launcher checks its
// launch and runs on the stream it is given.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/activation_math.h"
#include "kernels/cast_math.h"

namespace hpc::kernels {

template <typename T>
void fill(T* x, int64_t n, double value, cudaStream_t stream);
// y += alpha·x
template <typename T>
void axpy(double alpha, const T* x, T* y, int64_t n, cudaStream_t stream);
// x *= alpha
template <typename T>
void scale(T* x, int64_t n, double alpha, cudaStream_t stream);
// out = a + b (out may alias a or b)
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);
// dst = D(src), element by element (S: any storage type, uint8_t or int32_t).
template <typename S, typename D>
void convert(const S* src, D* dst, int64_t n, cudaStream_t stream);
// y[r, c, s] += bias[c] over n = rows·channels·spatial elements.
template <typename T>
void add_bias(T* y, const T* bias, int64_t n, int64_t channels, int64_t spatial, cudaStream_t stream);

template <typename T>
void activation_forward(ActivationKind act, const T* x, T* y, int64_t n, cudaStream_t stream);
// in is x for ReLU and GELU, y = f(x) for tanh (see activation_math.h).
template <typename T>
void activation_backward(ActivationKind act, const T* in, const T* dy, T* dx, int64_t n, cudaStream_t stream);

// y = x·keep/(1 − p), keep = random_uniform(seed, stream_id, offset + i) ≥ p: the CPU's mask, bit for bit.
template <typename T>
void dropout(const T* x, T* y, int64_t n, double p, uint64_t seed, uint64_t stream_id, uint64_t offset,
             cudaStream_t stream);

}  // namespace hpc::kernels
