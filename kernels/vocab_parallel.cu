// Kernels of the vocabulary split (see vocab_parallel.cuh).
#include <cmath>

#include "backend/cuda/check.h"
#include "kernels/device_util.cuh"
#include "kernels/vocab_parallel.cuh"

namespace hpc::kernels {

namespace {

// The block's total of v (sum, or max when MAX), in every thread. Fixed shuffle
// tree and warp order, so the result does not depend on timing.
template <bool MAX>
__device__ double block_all(double v, double* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const double o = __shfl_down_sync(0xffffffffu, v, offset);
    v = MAX ? fmax(v, o) : v + o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = shared[lane < warps ? lane : 0];  // a repeated warp total is harmless for max, dropped for sum
    if (!MAX && lane >= warps) v = 0;
    for (int offset = 16; offset > 0; offset /= 2) {
      const double o = __shfl_down_sync(0xffffffffu, v, offset);
      v = MAX ? fmax(v, o) : v + o;
    }
    if (lane == 0) shared[32] = v;
  }
  __syncthreads();
  v = shared[32];
  __syncthreads();  // `shared` is reused by the next reduction
  return v;
}

// ---- the embedding's shard ------------------------------------------------------------

// keys[i] = the id at position i as an integer; *first_bad = the first position whose id is not one
// of [0, vocab) (atomicMin over an initial n).
template <typename I>
__global__ void shard_keys_kernel(const I* ids, int64_t n, int64_t vocab, int32_t* keys, int64_t* first_bad) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const double v = double(ids[i]);
    const bool ok = v >= 0 && v < double(vocab) && v == floor(v);
    keys[i] = ok ? static_cast<int32_t>(v) : -1;
    if (!ok) atomicMin(reinterpret_cast<unsigned long long*>(first_bad), static_cast<unsigned long long>(i));
  }
}

template <typename T>
__global__ void shard_gather_kernel(const int32_t* keys, const T* wte, int64_t rows, int64_t first,
                                    const T* wpe, T* y, int64_t n, int64_t t_len, int64_t width) {
  for (int64_t e = thread_index(); e < n * width; e += grid_stride()) {
    const int64_t i = e / width, j = e % width, v = int64_t(keys[i]) - first;
    const bool mine = v >= 0 && v < rows;
    if (wpe != nullptr)
      y[e] = mine ? T(double(wte[v * width + j]) + double(wpe[(i % t_len) * width + j]))
                  : wpe[(i % t_len) * width + j];
    else
      y[e] = mine ? wte[v * width + j] : T(0.0);
  }
}

// rank[i] = the place of position i when positions are sorted by key, stably (O(n²) comparisons:
// microseconds for a few thousand tokens, no atomics, the same order every time).
__global__ void shard_sort_kernel(const int32_t* keys, int64_t n, int32_t* sorted_pos) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int32_t k = keys[i];
    int64_t rank = 0;
    for (int64_t q = 0; q < n; ++q) rank += keys[q] < k || (keys[q] == k && q < i) ? 1 : 0;
    sorted_pos[rank] = static_cast<int32_t>(i);
  }
}

// One thread per (run of equal keys, column): the run's rows added in position order into the shard's row.
template <typename T>
__global__ void shard_scatter_kernel(const int32_t* keys, const int32_t* sorted_pos, const T* dy, T* dwte,
                                     int64_t rows, int64_t first, int64_t n, int64_t width) {
  for (int64_t e = thread_index(); e < n * width; e += grid_stride()) {
    const int64_t s = e / width, j = e % width;
    const int32_t k = keys[sorted_pos[s]];
    if (s > 0 && keys[sorted_pos[s - 1]] == k) continue;  // not the start of a run
    const int64_t v = int64_t(k) - first;
    if (v < 0 || v >= rows) continue;
    double acc = double(dwte[v * width + j]);
    for (int64_t q = s; q < n && keys[sorted_pos[q]] == k; ++q)
      acc += double(dy[int64_t(sorted_pos[q]) * width + j]);
    dwte[v * width + j] = T(acc);
  }
}

// dwpe[t, j] += Σ_b dy[b, t, j], b in order.
template <typename T>
__global__ void shard_positions_kernel(const T* dy, T* dwpe, int64_t n, int64_t t_len, int64_t width) {
  for (int64_t e = thread_index(); e < t_len * width; e += grid_stride()) {
    const int64_t t = e / width, j = e % width;
    double acc = double(dwpe[e]);
    for (int64_t b = 0; b * t_len + t < n; ++b) acc += double(dy[(b * t_len + t) * width + j]);
    dwpe[e] = T(acc);
  }
}

// ---- the cross-entropy's passes -----------------------------------------------------------------

// The vocabulary shard's passes: one block per row (grid-stride over rows).
template <typename T>
__global__ void shard_max_kernel(const T* logits, int64_t n_valid, int64_t width, int64_t real,
                                 double* stats) {
  __shared__ double shared[33];
  for (int64_t r = blockIdx.x; r < n_valid; r += gridDim.x) {
    const T* z = logits + r * width;
    double m = -INFINITY;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmax(m, double(z[j]));
    m = block_all<true>(m, shared);
    if (threadIdx.x == 0) stats[r] = m;
  }
}

template <typename T>
__global__ void shard_sums_kernel(const T* logits, const int32_t* labels, int64_t n_valid, int64_t rows,
                                  int64_t width, int64_t real, int64_t col0, int64_t vocab, double* stats) {
  __shared__ double shared[33];
  for (int64_t r = blockIdx.x; r < n_valid; r += gridDim.x) {
    const T* z = logits + r * width;
    const double m = stats[r];
    double e = 0, s = 0;
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x) {
      const double v = double(z[j]);
      e += exp(v - m);
      s += v;
    }
    e = block_all<false>(e, shared);
    s = block_all<false>(s, shared);
    if (threadIdx.x == 0) {
      const int32_t label = labels[r];
      stats[rows + r] = e;
      stats[2 * rows + r] = s;
      stats[3 * rows + r] = label < 0 || label >= vocab            ? NAN
                            : label >= col0 && label < col0 + real ? double(z[label - col0])
                                                                   : 0.0;
    }
  }
}

template <typename T>
__global__ void shard_grad_kernel(const T* logits, const int32_t* labels, int64_t n_valid, int64_t rows,
                                  int64_t width, int64_t real, int64_t col0, int64_t vocab, double smoothing,
                                  double grad_scale, const double* stats, T* dlogits, double* above) {
  __shared__ double shared[33];
  const double off = smoothing / double(vocab), on = 1 - smoothing;
  for (int64_t r = blockIdx.x; r < n_valid; r += gridDim.x) {
    const T* z = logits + r * width;
    const int32_t label = labels[r];
    const double m = stats[r], inv = 1 / stats[rows + r], zl = stats[3 * rows + r];
    double count = 0;
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      if (j >= real) {
        if (dlogits != nullptr) dlogits[r * width + j] = T(0.0);
        continue;
      }
      const double v = double(z[j]);
      count += (v > zl) || (col0 + j < label && v == zl) ? 1 : 0;  // label_rank's rule
      if (dlogits != nullptr) {
        const T g = T(grad_scale * (exp(v - m) * inv - off));
        dlogits[r * width + j] = col0 + j == label ? T(double(g) - grad_scale * on) : g;
      }
    }
    count = block_all<false>(count, shared);
    if (threadIdx.x == 0) above[r] = count;
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

template <typename I>
void shard_keys(const I* ids, int64_t n, int64_t vocab, int32_t* keys, int64_t* first_bad,
                cudaStream_t stream) {
  if (n <= 0) return;
  shard_keys_kernel<<<grid_for(n), BLOCK, 0, stream>>>(ids, n, vocab, keys, first_bad);
  cudaLaunchCheck();
}

template <typename T>
void embedding_shard_forward(const int32_t* keys, const T* wte, int64_t rows, int64_t first, const T* wpe,
                             T* y, int64_t n, int64_t t_len, int64_t width, cudaStream_t stream) {
  if (n <= 0) return;
  shard_gather_kernel<<<grid_for(n * width), BLOCK, 0, stream>>>(keys, wte, rows, first, wpe, y, n, t_len,
                                                                 width);
  cudaLaunchCheck();
}

template <typename T>
void embedding_shard_backward(const int32_t* keys, int32_t* sorted_pos, const T* dy, T* dwte, int64_t rows,
                              int64_t first, T* dwpe, int64_t n, int64_t t_len, int64_t width,
                              cudaStream_t stream) {
  if (n <= 0) return;
  shard_sort_kernel<<<grid_for(n), BLOCK, 0, stream>>>(keys, n, sorted_pos);
  cudaLaunchCheck();
  shard_scatter_kernel<<<grid_for(n * width), BLOCK, 0, stream>>>(keys, sorted_pos, dy, dwte, rows, first, n,
                                                                  width);
  cudaLaunchCheck();
  if (dwpe != nullptr) {
    shard_positions_kernel<<<grid_for(t_len * width), BLOCK, 0, stream>>>(dy, dwpe, n, t_len, width);
    cudaLaunchCheck();
  }
}

namespace {
int shard_threads(int64_t width) { return width >= 2048 ? 512 : width >= 256 ? 128 : 32; }
}  // namespace

template <typename T>
void vocab_shard_max(const T* logits, int64_t n_valid, int64_t rows, int64_t width, int64_t real,
                     double* stats, cudaStream_t stream) {
  (void)rows;
  if (n_valid <= 0) return;
  shard_max_kernel<<<grid_for(n_valid, 1), shard_threads(width), 0, stream>>>(logits, n_valid, width, real,
                                                                              stats);
  cudaLaunchCheck();
}

template <typename T>
void vocab_shard_sums(const T* logits, const int32_t* labels, int64_t n_valid, int64_t rows, int64_t width,
                      int64_t real, int64_t col0, int64_t vocab, double* stats, cudaStream_t stream) {
  if (n_valid <= 0) return;
  shard_sums_kernel<<<grid_for(n_valid, 1), shard_threads(width), 0, stream>>>(
      logits, labels, n_valid, rows, width, real, col0, vocab, stats);
  cudaLaunchCheck();
}

template <typename T>
void vocab_shard_grad(const T* logits, const int32_t* labels, int64_t n_valid, int64_t rows, int64_t width,
                      int64_t real, int64_t col0, int64_t vocab, double smoothing, double grad_scale,
                      const double* stats, T* dlogits, double* above, cudaStream_t stream) {
  if (n_valid <= 0) return;
  shard_grad_kernel<<<grid_for(n_valid, 1), shard_threads(width), 0, stream>>>(
      logits, labels, n_valid, rows, width, real, col0, vocab, smoothing, grad_scale, stats, dlogits, above);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------------------

template void shard_keys<float>(const float*, int64_t, int64_t, int32_t*, int64_t*, cudaStream_t);
template void shard_keys<double>(const double*, int64_t, int64_t, int32_t*, int64_t*, cudaStream_t);
template void shard_keys<int32_t>(const int32_t*, int64_t, int64_t, int32_t*, int64_t*, cudaStream_t);

#define HPC_VOCAB(T)                                                                                       \
  template void embedding_shard_forward<T>(const int32_t*, const T*, int64_t, int64_t, const T*, T*,       \
                                           int64_t, int64_t, int64_t, cudaStream_t);                       \
  template void embedding_shard_backward<T>(const int32_t*, int32_t*, const T*, T*, int64_t, int64_t, T*,  \
                                            int64_t, int64_t, int64_t, cudaStream_t);                      \
  template void vocab_shard_max<T>(const T*, int64_t, int64_t, int64_t, int64_t, double*, cudaStream_t);   \
  template void vocab_shard_sums<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                    int64_t, double*, cudaStream_t);                                       \
  template void vocab_shard_grad<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                    int64_t, double, double, const double*, T*, double*, cudaStream_t);
HPC_VOCAB(float)
HPC_VOCAB(double)
HPC_VOCAB(Bf16)
HPC_VOCAB(Half)
#undef HPC_VOCAB

}  // namespace hpc::kernels
