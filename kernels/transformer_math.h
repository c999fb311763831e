// The transformer kernels' bodies (kernels/transformer.cu), as functions the
// CPU tests can call: token-id checks, the embedding gather and its
// deterministic scatter, LayerNorm rows, and the causal softmax rows of
// attention. GELU is not here: the MLP uses activation_math.h's
// gelu_forward/backward (tanh approximation) through the existing
// activation kernels.
//
// Row kernels run one warp per row. A warp's work is split into "lane"
// functions: lane l of LANES handles columns l, l + LANES, …, and the kernel
// combines the lanes' partial results with a butterfly (xor) shuffle. The
// tests call the same lane functions for every lane and combine them in the
// butterfly's order, so they run the GPU's index arithmetic and its
// arithmetic.
//
// T is the storage type, C = compute_t<T> the arithmetic type. Row sums of
// LayerNorm are double (as the CPU op's); softmax sums are in C.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cast_math.h"
#include "hd.h"

namespace hpc::kernels {

constexpr int WARP = 32;

// ---- token ids ------------------------------------------------------------------

// The largest id below which a value of storage type I is certainly the id
// the data held: a 16-bit float has 8 (bf16) or 11 (fp16) significant bits,
// so 257 arrives in bf16 as 256; such an id cannot be trusted.
template <typename I>
constexpr double exact_id_limit() {
  if constexpr (std::is_same_v<I, Bf16>)
    return 256.0;
  else if constexpr (std::is_same_v<I, Half>)
    return 2048.0;
  else if constexpr (std::is_same_v<I, float>)
    return 16777216.0;
  else
    return 9007199254740992.0;
}

// Whether v (an id as the model's input holds it) is an exact id in [0, vocab).
HD bool token_id_valid(double v, int64_t vocab, double exact_limit) {
  using std::floor;
  return v >= 0.0 && v < double(vocab) && v < exact_limit && v == floor(v);
}

// Embedding row element: token vector + position vector.
template <typename T>
HD T embedding_element(T tok, T pos) {
  using C = compute_t<T>;
  return T(C(tok) + C(pos));
}

// Whether key k (at position k) sorts before key i (at position i) in a
// stable sort by key: the stable rank of i is the count of such k.
HD int64_t sorts_before(int32_t key_k, int64_t k, int32_t key_i, int64_t i) {
  return (key_k < key_i || (key_k == key_i && k < i)) ? 1 : 0;
}

// Column j of the token-gradient row of the run of equal keys starting at
// sorted index k: dwte[key, j] plus dy of every position of that key, in
// position order (the CPU op's order of additions). Returns false (and does
// nothing) where k does not start a run or its key is out of range.
template <typename T>
HD bool embedding_token_grad(const int32_t* sorted_key, const int32_t* sorted_pos, int64_t n, int64_t k,
                             int64_t j, int64_t width, int64_t vocab, const T* dy, T* dwte) {
  const int32_t key = sorted_key[k];
  if (key < 0 || key >= vocab || (k > 0 && sorted_key[k - 1] == key)) return false;
  using C = compute_t<T>;
  T* out = dwte + int64_t(key) * width + j;
  C acc = C(*out);
  for (int64_t r = k; r < n && sorted_key[r] == key; ++r) acc += C(dy[int64_t(sorted_pos[r]) * width + j]);
  *out = T(acc);
  return true;
}

// Element e of the position gradient [t_len, width]: dwpe[e] plus dy of that
// position in every sample, in sample order.
template <typename T>
HD void embedding_position_grad(const T* dy, int64_t samples, int64_t t_len, int64_t width, int64_t e,
                                T* dwpe) {
  using C = compute_t<T>;
  C acc = C(dwpe[e]);
  for (int64_t b = 0; b < samples; ++b) acc += C(dy[b * t_len * width + e]);
  dwpe[e] = T(acc);
}

// ---- LayerNorm --------------------------------------------------------------------

template <typename T>
HD double ln_lane_sum(const T* x, int64_t width, int lane) {
  double s = 0;
  for (int64_t j = lane; j < width; j += WARP) s += double(x[j]);
  return s;
}

template <typename T>
HD double ln_lane_sq_dev(const T* x, int64_t width, int lane, double mu) {
  double s = 0;
  for (int64_t j = lane; j < width; j += WARP) {
    const double d = double(x[j]) - mu;
    s += d * d;
  }
  return s;
}

HD double ln_rstd(double sq_dev_sum, int64_t width, double eps) {
  using std::sqrt;
  return 1.0 / sqrt(sq_dev_sum / double(width) + eps);
}

// y = (x − mean)·rstd·gamma + beta for the lane's columns; mean and rstd in
// the compute type (for 16-bit storage: not rounded to 16 bits first).
template <typename T>
HD void ln_lane_normalize(const T* x, const T* gamma, const T* beta, int64_t width, int lane,
                          compute_t<T> mean, compute_t<T> rstd, T* y) {
  using C = compute_t<T>;
  for (int64_t j = lane; j < width; j += WARP) y[j] = T((C(x[j]) - mean) * rstd * C(gamma[j]) + C(beta[j]));
}

// Σ gamma·dy and Σ gamma·dy·x̂ over the lane's columns.
template <typename T>
HD void ln_lane_grad_sums(const T* x, const T* dy, const T* gamma, int64_t width, int lane, compute_t<T> mean,
                          compute_t<T> rstd, double& sum_g, double& sum_gx) {
  using C = compute_t<T>;
  sum_g = 0;
  sum_gx = 0;
  for (int64_t j = lane; j < width; j += WARP) {
    const C g = C(gamma[j]) * C(dy[j]);
    sum_g += double(g);
    sum_gx += double(g * ((C(x[j]) - mean) * rstd));
  }
}

// dx = rstd·(gamma·dy − mean(g) − x̂·mean(g·x̂)), written or added.
template <typename T>
HD void ln_lane_dx(const T* x, const T* dy, const T* gamma, int64_t width, int lane, compute_t<T> mean,
                   compute_t<T> rstd, compute_t<T> mean_g, compute_t<T> mean_gx, bool accumulate, T* dx) {
  using C = compute_t<T>;
  for (int64_t j = lane; j < width; j += WARP) {
    const C v = rstd * (C(gamma[j]) * C(dy[j]) - mean_g - (C(x[j]) - mean) * rstd * mean_gx);
    dx[j] = accumulate ? T(C(dx[j]) + v) : T(v);
  }
}

// Row splits of the parameter-gradient reduction: about 32 rows per thread,
// at most 1024 splits (grid.y). Split s covers rows [s·per, min((s+1)·per, rows)).
inline int64_t layernorm_param_splits(int64_t rows) {
  const int64_t s = (rows + 31) / 32;
  return s < 1 ? 1 : (s > 1024 ? 1024 : s);
}

// Column j's Σ dy·x̂ and Σ dy over rows [begin, end), in row order.
template <typename T>
HD void ln_param_partial(const T* x, const T* dy, const T* mean, const T* rstd, int64_t width, int64_t j,
                         int64_t begin, int64_t end, double& sum_dy_xhat, double& sum_dy) {
  using C = compute_t<T>;
  sum_dy_xhat = 0;
  sum_dy = 0;
  for (int64_t r = begin; r < end; ++r) {
    const C g = C(dy[r * width + j]);
    sum_dy_xhat += double(g * ((C(x[r * width + j]) - C(mean[r])) * C(rstd[r])));
    sum_dy += double(g);
  }
}

// ---- causal softmax rows ---------------------------------------------------------------

// Row t of a T×T score matrix attends to s ≤ t. p[0] is always valid, so it
// seeds every lane's maximum (no −inf needed).
template <typename T>
HD compute_t<T> softmax_lane_max(const T* p, int64_t t, int lane) {
  using C = compute_t<T>;
  C m = C(p[0]);
  for (int64_t s = lane; s <= t; s += WARP) m = C(p[s]) > m ? C(p[s]) : m;
  return m;
}

template <typename T>
HD compute_t<T> softmax_lane_exp_sum(const T* p, int64_t t, int lane, compute_t<T> mx) {
  using C = compute_t<T>;
  using std::exp;
  C sum = 0;
  for (int64_t s = lane; s <= t; s += WARP) sum += exp(C(p[s]) - mx);
  return sum;
}

// p[s] = exp(p[s] − max)/Σ for s ≤ t, exactly 0 above the diagonal.
template <typename T>
HD void softmax_lane_write(T* p, int64_t t, int64_t t_len, int lane, compute_t<T> mx, compute_t<T> inv_sum) {
  using C = compute_t<T>;
  using std::exp;
  for (int64_t s = lane; s < t_len; s += WARP) p[s] = s <= t ? T(exp(C(p[s]) - mx) * inv_sum) : T(0);
}

// Σ_{s ≤ t} p·dp over the lane's columns.
template <typename T>
HD compute_t<T> softmax_lane_dot(const T* p, const T* dp, int64_t t, int lane) {
  using C = compute_t<T>;
  C dot = 0;
  for (int64_t s = lane; s <= t; s += WARP) dot += C(p[s]) * C(dp[s]);
  return dot;
}

// dp[s] becomes dS = p·(dp − dot) for s ≤ t, 0 above the diagonal.
template <typename T>
HD void softmax_lane_backward(const T* p, T* dp, int64_t t, int64_t t_len, int lane, compute_t<T> dot) {
  using C = compute_t<T>;
  for (int64_t s = lane; s < t_len; s += WARP) dp[s] = s <= t ? T(C(p[s]) * (C(dp[s]) - dot)) : T(0);
}

}  // namespace hpc::kernels
