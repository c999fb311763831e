// CPU transformer ops: embedding gathers, LayerNorm rows, and causal
// attention as per-(sample, head) matrix products on strided views of the
// packed qkv rows (no copies into per-head buffers but Kᵀ and Vᵀ).
//
// Attention keeps the T×T probability matrix of every (sample, head) for
// backward (as PyTorch's unfused path does) instead of recomputing it as
// flash attention would: on a CPU with T ≤ 1024 the matrices fit in memory,
// and the products on them are where the time goes. They, the softmax and
// the transposes are the kernel table's (isa/kernel_table.h): in float32
// register tiles that skip what the causal mask makes zero (the scores above
// the diagonal, the probabilities' zero half; isa/tile_product.h says why),
// in float64 (gradient checks) OpenBLAS on the whole matrices, masked afterwards.
//
// The elementwise passes are written to vectorise (they were ~10% of a
// gpt-small step as scalar loops): the softmax backward's row dot product
// runs in sixteen partial sums, and LayerNorm's float32 row sums in four
// vector registers of partial sums (moment, dot_sums; float64 keeps
// row_sum's eight scalars).
#include "backend/ops_impl.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/dispatch.h"

namespace hpc::backend::cpu {

namespace {

// C = alpha·A·B with B and C row-major, A read by rows (a_rows, 1) or transposed (1, a_cols).
template <typename T>
void product(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a_rows, int64_t a_cols, const T* b,
             int64_t ldb, T* c, int64_t ldc, Causal causal) {
  kernel_table<T>().tile_product(m, n, k, alpha, StridedA<T>{a, a_rows, a_cols}, b, ldb, c, ldc, causal);
}

// The t_len×d head starting at x (rows ld apart) transposed into a d×t_len
// buffer of this thread's, reused from call to call.
template <typename T>
const T* transposed(const T* x, int64_t t_len, int64_t d, int64_t ld) {
  thread_local std::vector<T> buffer;
  buffer.resize(size_t(t_len * d));
  kernel_table<T>().transpose(x, t_len, d, ld, buffer.data());
  return buffer.data();
}

// Σ f(j) for j < n with LANES independent partial sums (a fixed order,
// so the same bits on every run) that the compiler maps onto vector
// registers: a single running total would wait on the add latency per element.
constexpr int64_t LANES = 8;
template <typename Acc, typename F>
Acc row_sum(int64_t n, F f) {
  Acc acc[LANES] = {};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int64_t l = 0; l < LANES; ++l) acc[l] += f(j + l);
  for (; j < n; ++j) acc[0] += f(j);
  Acc s = 0;
  for (Acc a : acc) s += a;
  return s;
}

// Float32 LayerNorm rows in vector types (GCC/Clang vector extensions, AVX2
// or better): row_sum's eight partial sums are one or two registers, so
// every add waits on the one before (add latency, ~0.5 cycle per element),
// while four registers of partial sums keep the adders busy. Fixed orders,
// so the same bits on every run.
using Double4 = double __attribute__((vector_size(32)));
using Float8 = float __attribute__((vector_size(32)));

template <typename V>
[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// Σ (x[j] − shift), or with Square Σ (x[j] − shift)², in double: sixteen
// partial sums (four vectors of four), then a fixed tree.
template <bool Square>
[[gnu::always_inline]] inline double moment(const float* x, int64_t n, double shift) {
  Double4 acc[4] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int v = 0; v < 4; ++v) {
      const float* p = x + j + 4 * v;
      const Double4 d = Double4{double(p[0]), double(p[1]), double(p[2]), double(p[3])} - shift;
      acc[v] += Square ? d * d : d;
    }
  double tail = 0;
  for (; j < n; ++j) {
    const double d = double(x[j]) - shift;
    tail += Square ? d * d : d;
  }
  const Double4 s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + tail;
}

// Σ g·dy and Σ g·dy·x̂ (x̂ = (x − m)·rs) over one row, in float: 32 partial
// sums of each (four vectors of eight), then a fixed tree.
[[gnu::always_inline]] inline void dot_sums(const float* g, const float* dy, const float* x, int64_t n,
                                            float m, float rs, float& sum_g, float& sum_gx) {
  Float8 a[4] = {}, b[4] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int v = 0; v < 4; ++v) {
      const int64_t k = j + 8 * v;
      const Float8 gd = load<Float8>(g + k) * load<Float8>(dy + k);
      a[v] += gd;
      b[v] += gd * ((load<Float8>(x + k) - m) * rs);
    }
  float tail_g = 0, tail_gx = 0;
  for (; j < n; ++j) {
    const float gd = g[j] * dy[j];
    tail_g += gd;
    tail_gx += gd * ((x[j] - m) * rs);
  }
  const Float8 sa = (a[0] + a[1]) + (a[2] + a[3]), sb = (b[0] + b[1]) + (b[2] + b[3]);
  sum_g = (((sa[0] + sa[1]) + (sa[2] + sa[3])) + ((sa[4] + sa[5]) + (sa[6] + sa[7]))) + tail_g;
  sum_gx = (((sb[0] + sb[1]) + (sb[2] + sb[3])) + ((sb[4] + sb[5]) + (sb[6] + sb[7]))) + tail_gx;
}

// Σ p[s]·g[s] for s < n (softmax backward's row dot product): in float32
// sixteen partial sums (two vectors of eight) and a fixed tree, else in order.
template <typename T>
T row_dot(const T* p, const T* g, int64_t n) {
  int64_t s = 0;
  T tail = 0;
  if constexpr (std::is_same_v<T, float>) {
    Float8 a[2] = {};
    for (; s + 16 <= n; s += 16)
      for (int v = 0; v < 2; ++v) a[v] += load<Float8>(p + s + 8 * v) * load<Float8>(g + s + 8 * v);
    const Float8 sa = a[0] + a[1];
    tail = ((sa[0] + sa[1]) + (sa[2] + sa[3])) + ((sa[4] + sa[5]) + (sa[6] + sa[7]));
  }
  for (; s < n; ++s) tail += p[s] * g[s];
  return tail;
}

// The token id at position i, checked: a float that is not an id in [0, vocab) is bad data.
template <typename T>
int64_t token_id(const T* ids, int64_t i, int64_t vocab) {
  const T v = ids[i];
  if (!(v >= T(0) && v < T(vocab) && v == std::floor(v)))
    throw UserError("token " + std::to_string(double(v)) + " at position " + std::to_string(i) +
                    " of the batch is not an id in the model's vocabulary [0, " + std::to_string(vocab) +
                    ")");
  return static_cast<int64_t>(v);
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y) {
  const int64_t c = wte.shape()[1], vocab = wte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  HPC_ASSERT(y.count() == bt * c && wpe.shape()[1] == c && wpe.shape()[0] >= t_len, "embedding: shapes");
  dispatch_float(y.dtype(), "embedding_forward", [&]<typename T>() {
    const T* id = ids.data<T>();
    for (int64_t i = 0; i < bt; ++i) {
      const T* tok = wte.data<T>() + token_id(id, i, vocab) * c;
      const T* pos = wpe.data<T>() + (i % t_len) * c;
      T* out = y.data<T>() + i * c;
      for (int64_t j = 0; j < c; ++j) out[j] = tok[j] + pos[j];
    }
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe) {
  const int64_t c = dwte.shape()[1], vocab = dwte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  dispatch_float(dy.dtype(), "embedding_backward", [&]<typename T>() {
    const T* id = ids.data<T>();
    for (int64_t i = 0; i < bt; ++i) {
      const T* g = dy.data<T>() + i * c;
      T* tok = dwte.data<T>() + token_id(id, i, vocab) * c;
      T* pos = dwpe.data<T>() + (i % t_len) * c;
      for (int64_t j = 0; j < c; ++j) {
        tok[j] += g[j];
        pos[j] += g[j];
      }
    }
  });
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  const int64_t c = gamma.count(), rows = x.count() / c;
  HPC_ASSERT(y.count() == x.count() && mean.count() >= rows && rstd.count() >= rows, "layernorm: shapes");
  dispatch_float(y.dtype(), "layernorm_forward", [&]<typename T>() {
    const T *g = gamma.data<T>(), *b = beta.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * c;
      T* out = y.data<T>() + r * c;
      // Two passes: no E[x²] − E[x]² cancellation.
      double mu, v;
      if constexpr (std::is_same_v<T, float>) {
        mu = moment<false>(in, c, 0.0) / double(c);
        v = moment<true>(in, c, mu);
      } else {
        mu = row_sum<double>(c, [&](int64_t j) { return double(in[j]); }) / double(c);
        v = row_sum<double>(c, [&](int64_t j) { return (in[j] - mu) * (in[j] - mu); });
      }
      const T m = T(mu), rs = T(1.0 / std::sqrt(v / double(c) + eps));
      for (int64_t j = 0; j < c; ++j) out[j] = (in[j] - m) * rs * g[j] + b[j];
      mean.data<T>()[r] = m;
      rstd.data<T>()[r] = rs;
    }
  });
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta) {
  const int64_t c = gamma.count(), rows = x.count() / c;
  HPC_ASSERT(dy.count() == x.count() && (!dx.defined() || dx.count() == x.count()), "layernorm: shapes");
  dispatch_float(dy.dtype(), "layernorm_backward", [&]<typename T>() {
    const T* g = gamma.data<T>();
    T *dg = dgamma.data<T>(), *db = dbeta.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * c;
      const T* d = dy.data<T>() + r * c;
      const T m = mean.data<T>()[r], rs = rstd.data<T>()[r];
      for (int64_t j = 0; j < c; ++j) {
        dg[j] += d[j] * ((in[j] - m) * rs);
        db[j] += d[j];
      }
      T sum_g, sum_gx;
      if constexpr (std::is_same_v<T, float>) {
        dot_sums(g, d, in, c, m, rs, sum_g, sum_gx);
      } else {
        sum_g = row_sum<T>(c, [&](int64_t j) { return g[j] * d[j]; });
        sum_gx = row_sum<T>(c, [&](int64_t j) { return g[j] * d[j] * ((in[j] - m) * rs); });
      }
      if (!dx.defined()) continue;
      const T mean_g = sum_g / T(c), mean_gx = sum_gx / T(c);
      T* out = dx.data<T>() + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const T v = rs * (g[j] * d[j] - mean_g - (in[j] - m) * rs * mean_gx);
        out[j] = accumulate ? out[j] + v : v;
      }
    }
  });
}

void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out) {
  const int64_t b_n = qkv.shape()[0], t_len = qkv.shape()[1], c3 = qkv.shape()[2], c = c3 / 3, d = c / heads;
  HPC_ASSERT(c3 == 3 * c && c == heads * d && out.count() == b_n * t_len * c &&
                 probs.count() >= b_n * heads * t_len * t_len,
             "attention_forward: shapes");
  dispatch_float(out.dtype(), "attention_forward", [&]<typename T>() {
    const T inv_sqrt_d = T(1.0 / std::sqrt(double(d)));
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const T* q = qkv.data<T>() + b * t_len * c3 + h * d;
        const T* k = q + c;
        const T* v = q + 2 * c;
        T* p = probs.data<T>() + (b * heads + h) * t_len * t_len;
        product<T>(t_len, t_len, d, inv_sqrt_d, q, c3, 1, transposed(k, t_len, d, c3), t_len, p, t_len,
                   Causal::LowerOut);  // S = Q·Kᵀ/√d
        kernel_table<T>().causal_softmax(p, t_len);
        product<T>(t_len, d, t_len, T(1), p, t_len, 1, v, c3, out.data<T>() + b * t_len * c + h * d, c,
                   Causal::LowerA);  // O = P·V
      }
  });
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        const Tensor& dqkv, const Tensor& scratch) {
  const int64_t b_n = qkv.shape()[0], t_len = qkv.shape()[1], c3 = qkv.shape()[2], c = c3 / 3, d = c / heads;
  HPC_ASSERT(
      dqkv.count() == qkv.count() && dout.count() == b_n * t_len * c && scratch.count() >= t_len * t_len,
      "attention_backward: shapes");
  dispatch_float(dqkv.dtype(), "attention_backward", [&]<typename T>() {
    const T inv_sqrt_d = T(1.0 / std::sqrt(double(d)));
    T* dp = scratch.data<T>();
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = b * t_len * c3 + h * d;
        const T* q = qkv.data<T>() + base;
        const T* k = q + c;
        const T* v = q + 2 * c;
        T* dq = dqkv.data<T>() + base;
        T* dk = dq + c;
        T* dv = dq + 2 * c;
        const T* p = probs.data<T>() + (b * heads + h) * t_len * t_len;
        const T* dgo = dout.data<T>() + b * t_len * c + h * d;
        // dP = dO·Vᵀ and dV = Pᵀ·dO.
        product<T>(t_len, t_len, d, T(1), dgo, c, 1, transposed(v, t_len, d, c3), t_len, dp, t_len,
                   Causal::LowerOut);
        product<T>(t_len, d, t_len, T(1), p, 1, t_len, dgo, c, dv, c3, Causal::UpperA);
        // Softmax backward per row, into dP's storage: dS = P ⊙ (dP − Σ P·dP); 0 above the diagonal.
        for (int64_t t = 0; t < t_len; ++t) {
          const T* pr = p + t * t_len;
          T* g = dp + t * t_len;
          const T dot = row_dot(pr, g, t + 1);
          for (int64_t s = 0; s <= t; ++s) g[s] = pr[s] * (g[s] - dot);
          for (int64_t s = t + 1; s < t_len; ++s) g[s] = T(0);
        }
        // dQ = dS·K/√d and dK = dSᵀ·Q/√d.
        product<T>(t_len, d, t_len, inv_sqrt_d, dp, t_len, 1, k, c3, dq, c3, Causal::LowerA);
        product<T>(t_len, d, t_len, inv_sqrt_d, dp, 1, t_len, q, c3, dk, c3, Causal::UpperA);
      }
  });
}

}  // namespace hpc::backend::cpu
