// Transformer kernels: token ids, embedding gather and scatter, LayerNorm
// rows, causal softmax rows. Launchers only (host-includable); the kernels
// are in transformer.cu, their bodies in transformer_math.h. The attention
// GEMMs are cuBLAS calls (transformer_plan.h), not kernels of ours.
//
// T is a storage type (float, double, Bf16, Half), I a token-id type (those
// or int32_t). Row kernels run one warp per row; nothing here uses floating-
// point atomics, so every result is the same bits on every run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"

namespace hpc::kernels {

// ---- embedding ----------------------------------------------------------------

// keys[i] = ids[i] as an int32 where it is an exact id in [0, vocab)
// (token_id_valid), else vocab. When first_bad is given (one device
// uint64), it is set to the smallest index of an invalid id, or to
// UINT64_MAX when every id is valid.
template <typename I>
void token_keys(const I* ids, int64_t n, int64_t vocab, int32_t* keys, unsigned long long* first_bad,
                cudaStream_t stream);

// y[i, :] = wte[keys[i], :] + wpe[i mod t_len, :] for n rows of width columns (wpe null: wte alone).
template <typename T>
void embedding_forward(const int32_t* keys, const T* wte, const T* wpe, T* y, int64_t n, int64_t t_len,
                       int64_t width, int64_t vocab, cudaStream_t stream);

// dwte[keys[i]] += dy[i] and dwpe[i mod t_len] += dy[i] over n rows (dwpe null: none). sorted_key
// and sorted_pos (n int32 each) are scratch. Deterministic without atomics: a
// stable sort of the positions by key (each position's rank counted over all
// keys, O(n²) comparisons through shared memory: microseconds at n = 8192),
// then one thread per (key run, column) adds the run's rows in position order.
template <typename T>
void embedding_backward(const int32_t* keys, int32_t* sorted_key, int32_t* sorted_pos, const T* dy, T* dwte,
                        T* dwpe, int64_t n, int64_t t_len, int64_t width, int64_t vocab, cudaStream_t stream);

// ---- LayerNorm -------------------------------------------------------------------

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean, T* rstd,
                       int64_t rows, int64_t width, cudaStream_t stream);

// dx (nullptr: not wanted) written or added; dgamma += Σ dy·x̂, dbeta += Σ dy
// (column sums over layernorm_param_splits(rows) row splits into partials,
// 2·splits·width doubles, then added in split order).
template <typename T>
void layernorm_backward(const T* x, const T* dy, const T* gamma, const T* mean, const T* rstd, T* dx,
                        bool accumulate, T* dgamma, T* dbeta, double* partials, int64_t rows, int64_t width,
                        cudaStream_t stream);

// ---- causal softmax ----------------------------------------------------------------

// batch matrices of rows × t_len, entry z at p + z·batch_stride, rows
// contiguous: each row t becomes the softmax of its first t + offset + 1
// scores, 0 after them (offset 0: a window's T×T matrices; decoding: the
// cached positions before the new rows).
template <typename T>
void causal_softmax_forward(T* p, int64_t batch, int64_t batch_stride, int64_t rows, int64_t t_len,
                            int64_t offset, cudaStream_t stream);

// dp (the gradient of the probabilities p) becomes the gradient of the scores, in place.
template <typename T>
void causal_softmax_backward(const T* p, int64_t p_stride, T* dp, int64_t dp_stride, int64_t batch,
                             int64_t t_len, cudaStream_t stream);

}  // namespace hpc::kernels
