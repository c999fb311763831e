// Kernels of the Llama pieces: RMSNorm rows, rotary embeddings, the SwiGLU
// gate. Launchers only (host-includable); the kernels are in llama.cu, their
// arithmetic in llama_math.h. T is a storage type (float, double, Bf16,
// Half). RMSNorm rows run one warp per row (transformer.cu's scheme); its
// weight gradient is column partials over row splits added in split order,
// as LayerNorm's: nothing here uses floating-point atomics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"

namespace hpc::kernels {

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, double eps, T* y, T* rstd, int64_t rows, int64_t width,
                     cudaStream_t stream);

// dx (nullptr: not wanted) written or added; dweight += Σ dy·x̂ over
// layernorm_param_splits(rows) row splits (partials: splits·width doubles).
template <typename T>
void rmsnorm_backward(const T* x, const T* dy, const T* weight, const T* rstd, T* dx, bool accumulate,
                      T* dweight, double* partials, int64_t rows, int64_t width, cudaStream_t stream);

// In place on the q and k heads of `rows` qkv rows (rotary_element).
template <typename T>
void rotary_apply(T* qkv, int64_t rows, int64_t t_len, int64_t heads, int64_t kv_heads, int64_t d,
                  const T* cos_table, const T* sin_table, bool interleaved, bool inverse,
                  cudaStream_t stream);

// out [rows, f] = silu(gate)·up of gate_up [rows, 2f].
template <typename T>
void swiglu_forward(const T* gate_up, T* out, int64_t rows, int64_t f, cudaStream_t stream);

template <typename T>
void swiglu_backward(const T* gate_up, const T* dout, T* dgate_up, int64_t rows, int64_t f,
                     cudaStream_t stream);

}  // namespace hpc::kernels
