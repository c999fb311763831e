// Transformer kernels (see transformer.cuh). Element-wise passes are
// grid-stride loops; row passes give each row to one warp, whose lanes
// combine their partial sums with a butterfly shuffle (fixed order: the
// same bits every run). The per-element and per-lane arithmetic is in
// transformer_math.h, which test_kernels_emulated runs on the CPU.
#include "backend/cuda/check.h"
#include "core/error.h"
#include "kernels/device_util.cuh"
#include "kernels/transformer.cuh"
#include "kernels/transformer_math.h"

namespace hpc::kernels {

namespace {

constexpr int WARPS_PER_BLOCK = BLOCK / WARP;

__device__ __forceinline__ int64_t warp_index() {
  return static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / WARP;
}
__device__ __forceinline__ int64_t warp_stride() { return static_cast<int64_t>(gridDim.x) * WARPS_PER_BLOCK; }

// Every lane ends with the same value: a + b == b + a in IEEE arithmetic.
template <typename V>
__device__ V warp_sum(V v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <typename V>
__device__ V warp_max(V v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) {
    const V w = __shfl_xor_sync(0xffffffffu, v, offset);
    v = w > v ? w : v;
  }
  return v;
}

unsigned grid_for_rows(int64_t rows) { return grid_for(rows, WARPS_PER_BLOCK); }

// ---- embedding ------------------------------------------------------------------

template <typename I>
__global__ void token_keys_kernel(const I* ids, int64_t n, int64_t vocab, double limit, int32_t* keys,
                                  unsigned long long* first_bad) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const double v = static_cast<double>(ids[i]);
    const bool ok = token_id_valid(v, vocab, limit);
    keys[i] = ok ? static_cast<int32_t>(v) : static_cast<int32_t>(vocab);
    if (!ok && first_bad != nullptr) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* keys, const T* wte, const T* wpe, T* y, int64_t n,
                                         int64_t t_len, int64_t width, int64_t vocab) {
  for (int64_t e = thread_index(); e < n * width; e += grid_stride()) {
    const int64_t r = e / width, j = e % width;
    const int64_t key = keys[r];
    if (key >= vocab)
      y[e] = T(0);
    else
      y[e] = wpe != nullptr ? embedding_element(wte[key * width + j], wpe[(r % t_len) * width + j])
                            : wte[key * width + j];
  }
}

// One thread per position; the grid covers n exactly (every thread takes part in the tile loads).
__global__ void stable_rank_kernel(const int32_t* keys, int64_t n, int32_t* sorted_key, int32_t* sorted_pos) {
  __shared__ int32_t tile[BLOCK];
  const int64_t i = thread_index();
  const int32_t key = i < n ? keys[i] : 0;
  int64_t rank = 0;
  for (int64_t base = 0; base < n; base += BLOCK) {
    if (base + threadIdx.x < n) tile[threadIdx.x] = keys[base + threadIdx.x];
    __syncthreads();
    const int64_t count = n - base < BLOCK ? n - base : BLOCK;
    if (i < n)
      for (int64_t q = 0; q < count; ++q) rank += sorts_before(tile[q], base + q, key, i);
    __syncthreads();
  }
  if (i < n) {
    sorted_key[rank] = key;
    sorted_pos[rank] = static_cast<int32_t>(i);
  }
}

template <typename T>
__global__ void embedding_token_grad_kernel(const int32_t* sorted_key, const int32_t* sorted_pos, const T* dy,
                                            T* dwte, int64_t n, int64_t width, int64_t vocab) {
  for (int64_t e = thread_index(); e < n * width; e += grid_stride())
    embedding_token_grad(sorted_key, sorted_pos, n, e / width, e % width, width, vocab, dy, dwte);
}

template <typename T>
__global__ void embedding_position_grad_kernel(const T* dy, T* dwpe, int64_t samples, int64_t t_len,
                                               int64_t width) {
  for (int64_t e = thread_index(); e < t_len * width; e += grid_stride())
    embedding_position_grad(dy, samples, t_len, width, e, dwpe);
}

// ---- LayerNorm ---------------------------------------------------------------------

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean,
                                         T* rstd, int64_t rows, int64_t width) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % WARP);
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const T* in = x + r * width;
    const double mu = warp_sum(ln_lane_sum(in, width, lane)) / static_cast<double>(width);
    const double rs = ln_rstd(warp_sum(ln_lane_sq_dev(in, width, lane, mu)), width, eps);
    ln_lane_normalize(in, gamma, beta, width, lane, static_cast<C>(mu), static_cast<C>(rs), y + r * width);
    if (lane == 0) {
      mean[r] = T(mu);
      rstd[r] = T(rs);
    }
  }
}

template <typename T>
__global__ void layernorm_dx_kernel(const T* x, const T* dy, const T* gamma, const T* mean, const T* rstd,
                                    T* dx, bool accumulate, int64_t rows, int64_t width) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % WARP);
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const T* in = x + r * width;
    const T* d = dy + r * width;
    const C m = C(mean[r]), rs = C(rstd[r]);
    double sum_g = 0, sum_gx = 0;
    ln_lane_grad_sums(in, d, gamma, width, lane, m, rs, sum_g, sum_gx);
    sum_g = warp_sum(sum_g);
    sum_gx = warp_sum(sum_gx);
    const double w = static_cast<double>(width);
    ln_lane_dx(in, d, gamma, width, lane, m, rs, static_cast<C>(sum_g / w), static_cast<C>(sum_gx / w),
               accumulate, dx + r * width);
  }
}

// Grid (column blocks, splits): thread j of split s sums its rows of column j.
template <typename T>
__global__ void layernorm_param_partials_kernel(const T* x, const T* dy, const T* mean, const T* rstd,
                                                double* partials, int64_t rows, int64_t width) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t split = blockIdx.y, splits = gridDim.y;
  if (j >= width) return;
  const int64_t per = (rows + splits - 1) / splits;
  const int64_t begin = split * per, end = begin + per < rows ? begin + per : rows;
  double s_xhat = 0, s_dy = 0;
  if (begin < end) ln_param_partial(x, dy, mean, rstd, width, j, begin, end, s_xhat, s_dy);
  partials[split * width + j] = s_xhat;
  partials[(splits + split) * width + j] = s_dy;
}

template <typename T>
__global__ void layernorm_param_finish_kernel(const double* partials, T* dgamma, T* dbeta, int64_t splits,
                                              int64_t width) {
  for (int64_t j = thread_index(); j < width; j += grid_stride()) {
    double s_xhat = static_cast<double>(dgamma[j]), s_dy = static_cast<double>(dbeta[j]);
    for (int64_t s = 0; s < splits; ++s) {
      s_xhat += partials[s * width + j];
      s_dy += partials[(splits + s) * width + j];
    }
    dgamma[j] = T(s_xhat);
    dbeta[j] = T(s_dy);
  }
}

// ---- causal softmax -------------------------------------------------------------------

template <typename T>
__global__ void causal_softmax_forward_kernel(T* p, int64_t batch, int64_t batch_stride, int64_t rows,
                                              int64_t t_len, int64_t offset) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % WARP);
  for (int64_t r = warp_index(); r < batch * rows; r += warp_stride()) {
    const int64_t z = r / rows, t = r % rows;
    T* row = p + z * batch_stride + t * t_len;
    const C mx = warp_max(softmax_lane_max(row, t + offset, lane));
    const C sum = warp_sum(softmax_lane_exp_sum(row, t + offset, lane, mx));
    softmax_lane_write(row, t + offset, t_len, lane, mx, C(1) / sum);
  }
}

template <typename T>
__global__ void causal_softmax_backward_kernel(const T* p, int64_t p_stride, T* dp, int64_t dp_stride,
                                               int64_t batch, int64_t t_len) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % WARP);
  for (int64_t r = warp_index(); r < batch * t_len; r += warp_stride()) {
    const int64_t z = r / t_len, t = r % t_len;
    const T* prow = p + z * p_stride + t * t_len;
    T* drow = dp + z * dp_stride + t * t_len;
    const C dot = warp_sum(softmax_lane_dot(prow, drow, t, lane));
    softmax_lane_backward(prow, drow, t, t_len, lane, dot);
  }
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

template <typename I>
void token_keys(const I* ids, int64_t n, int64_t vocab, int32_t* keys, unsigned long long* first_bad,
                cudaStream_t stream) {
  if (first_bad != nullptr) cudaCheck(cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, stream));
  if (n <= 0) return;
  token_keys_kernel<<<grid_for(n), BLOCK, 0, stream>>>(ids, n, vocab, exact_id_limit<I>(), keys, first_bad);
  cudaLaunchCheck();
}

template <typename T>
void embedding_forward(const int32_t* keys, const T* wte, const T* wpe, T* y, int64_t n, int64_t t_len,
                       int64_t width, int64_t vocab, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  embedding_forward_kernel<<<grid_for(n * width), BLOCK, 0, stream>>>(keys, wte, wpe, y, n, t_len, width,
                                                                      vocab);
  cudaLaunchCheck();
}

template <typename T>
void embedding_backward(const int32_t* keys, int32_t* sorted_key, int32_t* sorted_pos, const T* dy, T* dwte,
                        T* dwpe, int64_t n, int64_t t_len, int64_t width, int64_t vocab,
                        cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  const int64_t rank_blocks = (n + BLOCK - 1) / BLOCK;
  HPC_ASSERT(rank_blocks <= MAX_GRID, "embedding_backward (CUDA): too many tokens in one batch");
  stable_rank_kernel<<<static_cast<unsigned>(rank_blocks), BLOCK, 0, stream>>>(keys, n, sorted_key,
                                                                               sorted_pos);
  cudaLaunchCheck();
  embedding_token_grad_kernel<<<grid_for(n * width), BLOCK, 0, stream>>>(sorted_key, sorted_pos, dy, dwte, n,
                                                                         width, vocab);
  cudaLaunchCheck();
  if (dwpe == nullptr) return;  // rotary positions: no position table
  embedding_position_grad_kernel<<<grid_for(t_len * width), BLOCK, 0, stream>>>(dy, dwpe, n / t_len, t_len,
                                                                                width);
  cudaLaunchCheck();
}

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean, T* rstd,
                       int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows <= 0) return;
  layernorm_forward_kernel<<<grid_for_rows(rows), BLOCK, 0, stream>>>(x, gamma, beta, eps, y, mean, rstd,
                                                                      rows, width);
  cudaLaunchCheck();
}

template <typename T>
void layernorm_backward(const T* x, const T* dy, const T* gamma, const T* mean, const T* rstd, T* dx,
                        bool accumulate, T* dgamma, T* dbeta, double* partials, int64_t rows, int64_t width,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  if (dx != nullptr) {
    layernorm_dx_kernel<<<grid_for_rows(rows), BLOCK, 0, stream>>>(x, dy, gamma, mean, rstd, dx, accumulate,
                                                                   rows, width);
    cudaLaunchCheck();
  }
  const int64_t splits = layernorm_param_splits(rows);
  const dim3 grid(static_cast<unsigned>((width + BLOCK - 1) / BLOCK), static_cast<unsigned>(splits));
  layernorm_param_partials_kernel<<<grid, BLOCK, 0, stream>>>(x, dy, mean, rstd, partials, rows, width);
  cudaLaunchCheck();
  layernorm_param_finish_kernel<<<grid_for(width), BLOCK, 0, stream>>>(partials, dgamma, dbeta, splits,
                                                                       width);
  cudaLaunchCheck();
}

template <typename T>
void causal_softmax_forward(T* p, int64_t batch, int64_t batch_stride, int64_t rows, int64_t t_len,
                            int64_t offset, cudaStream_t stream) {
  if (batch <= 0 || rows <= 0 || t_len <= 0) return;
  causal_softmax_forward_kernel<<<grid_for_rows(batch * rows), BLOCK, 0, stream>>>(p, batch, batch_stride,
                                                                                   rows, t_len, offset);
  cudaLaunchCheck();
}

template <typename T>
void causal_softmax_backward(const T* p, int64_t p_stride, T* dp, int64_t dp_stride, int64_t batch,
                             int64_t t_len, cudaStream_t stream) {
  if (batch <= 0 || t_len <= 0) return;
  causal_softmax_backward_kernel<<<grid_for_rows(batch * t_len), BLOCK, 0, stream>>>(p, p_stride, dp,
                                                                                     dp_stride, batch, t_len);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------------

#define HPC_TOKEN_KEYS(I) \
  template void token_keys<I>(const I*, int64_t, int64_t, int32_t*, unsigned long long*, cudaStream_t);
HPC_TOKEN_KEYS(float)
HPC_TOKEN_KEYS(double)
HPC_TOKEN_KEYS(Bf16)
HPC_TOKEN_KEYS(Half)
HPC_TOKEN_KEYS(int32_t)
#undef HPC_TOKEN_KEYS

#define HPC_TRANSFORMER(T)                                                                                \
  template void embedding_forward<T>(const int32_t*, const T*, const T*, T*, int64_t, int64_t, int64_t,   \
                                     int64_t, cudaStream_t);                                              \
  template void embedding_backward<T>(const int32_t*, int32_t*, int32_t*, const T*, T*, T*, int64_t,      \
                                      int64_t, int64_t, int64_t, cudaStream_t);                           \
  template void layernorm_forward<T>(const T*, const T*, const T*, double, T*, T*, T*, int64_t, int64_t,  \
                                     cudaStream_t);                                                       \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, bool, T*, T*, \
                                      double*, int64_t, int64_t, cudaStream_t);                           \
  template void causal_softmax_forward<T>(T*, int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template void causal_softmax_backward<T>(const T*, int64_t, T*, int64_t, int64_t, int64_t, cudaStream_t);
HPC_TRANSFORMER(float)
HPC_TRANSFORMER(double)
HPC_TRANSFORMER(Bf16)
HPC_TRANSFORMER(Half)
#undef HPC_TRANSFORMER

}  // namespace hpc::kernels
