// Kernels of the vocabulary split over a tensor-parallel group (ops.def:
// embedding_shard_*, vocab_shard_*). Launchers only; kernels in
// vocab_parallel.cu.
//
// The embedding's shard: token ids → int32 keys (checked against the whole
// vocabulary), a gather that writes 0 for ids other shards hold, and a
// deterministic scatter-add (positions stably sorted by key, then one thread
// per run of equal keys and column adds the run in position order: the
// CPU's order, no atomics). The cross-entropy's passes: one block per row,
// fixed-order block reductions, as the unsplit loss kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"

namespace hpc::kernels {

// keys[i] = ids[i] as an integer id; *first_bad (device, set to n beforehand) = the first position
// whose id is not in [0, vocab). I: float, double or int32.
template <typename I>
void shard_keys(const I* ids, int64_t n, int64_t vocab, int32_t* keys, int64_t* first_bad,
                cudaStream_t stream);

// y[i, :] = wte[keys[i] − first, :] where 0 ≤ keys[i] − first < rows, else 0; + wpe[i mod t_len, :] when wpe.
template <typename T>
void embedding_shard_forward(const int32_t* keys, const T* wte, int64_t rows, int64_t first, const T* wpe,
                             T* y, int64_t n, int64_t t_len, int64_t width, cudaStream_t stream);

// dwte[keys[i] − first, :] += dy[i, :] for the shard's ids, in position order; dwpe[t, :] += Σ_b dy[b·t_len +
// t, :] when dwpe. sorted_pos: device scratch of n int32.
template <typename T>
void embedding_shard_backward(const int32_t* keys, int32_t* sorted_pos, const T* dy, T* dwte, int64_t rows,
                              int64_t first, T* dwpe, int64_t n, int64_t t_len, int64_t width,
                              cudaStream_t stream);

// The vocabulary-parallel cross-entropy's passes over the first n_valid rows of a shard
// logits [rows, width] (columns [col0, col0 + width), the first `real` of them real classes):
// ops.def's vocab_shard_max / _sums / _grad, one block per row, loss_math.h's shard_row_* rules with
// the block's fixed-order reductions. stats: device float64 [4, rows]. A label outside [0, vocab) makes
// its row's stats[3] NaN (the host names it).
template <typename T>
void vocab_shard_max(const T* logits, int64_t n_valid, int64_t rows, int64_t width, int64_t real,
                     double* stats, cudaStream_t stream);
template <typename T>
void vocab_shard_sums(const T* logits, const int32_t* labels, int64_t n_valid, int64_t rows, int64_t width,
                      int64_t real, int64_t col0, int64_t vocab, double* stats, cudaStream_t stream);
template <typename T>
void vocab_shard_grad(const T* logits, const int32_t* labels, int64_t n_valid, int64_t rows, int64_t width,
                      int64_t real, int64_t col0, int64_t vocab, double smoothing, double grad_scale,
                      const double* stats, T* dlogits, double* above, cudaStream_t stream);

}  // namespace hpc::kernels
