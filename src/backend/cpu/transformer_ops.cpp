// CPU transformer ops: embedding gathers, LayerNorm rows, and causal
// attention as per-(sample, head) matrix products on strided views of the
// packed qkv rows (no copies into per-head buffers but Kᵀ and Vᵀ), with
// grouped-query attention (a key/value head shared by a group of query
// heads: transposed once per group in forward, its gradient summed over the group
// in backward) and the incremental decoding of hpctrain sample (the new
// positions against a key/value cache, in OpenBLAS).
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

#include <cblas.h>

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

// C = alpha·op(A)·op(B) + beta·C on row-major matrices with leading dimensions (OpenBLAS).
template <typename T>
void gemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto op_a = ta ? CblasTrans : CblasNoTrans, op_b = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c,
                int(ldc));
  else
    cblas_dgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c,
                int(ldc));
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

// The attention layout of qkv rows (ops.def): H query heads, then KV key
// heads, then KV value heads, d columns each; query head h reads key/value
// head h / (H / KV).
struct HeadLayout {
  int64_t heads, kv_heads, d;
  int64_t row() const { return (heads + 2 * kv_heads) * d; }
  int64_t q_width() const { return heads * d; }
  int64_t group() const { return heads / kv_heads; }
  int64_t q(int64_t h) const { return h * d; }
  int64_t k(int64_t h) const { return (heads + h / group()) * d; }
  int64_t v(int64_t h) const { return (heads + kv_heads + h / group()) * d; }
};

HeadLayout head_layout(const Tensor& qkv, int64_t heads, int64_t kv_heads, const char* op) {
  HPC_ASSERT(heads > 0 && kv_heads > 0 && heads % kv_heads == 0,
             std::string(op) + ": heads not a multiple of kv_heads");
  const int64_t c3 = qkv.shape()[qkv.shape().rank() - 1], d = c3 / (heads + 2 * kv_heads);
  HPC_ASSERT(d > 0 && c3 == (heads + 2 * kv_heads) * d, std::string(op) + ": qkv width");
  return {heads, kv_heads, d};
}

// c[i] += v[i] for n values (a shared key/value head's gradient over its group).
template <typename T>
void add_rows(const T* v, int64_t rows, int64_t cols, T* c, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] += v[i * cols + j];
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y) {
  const int64_t c = wte.shape()[1], vocab = wte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  HPC_ASSERT(y.count() == bt * c && (!wpe.defined() || (wpe.shape()[1] == c && wpe.shape()[0] >= t_len)),
             "embedding: shapes");
  dispatch_float(y.dtype(), "embedding_forward", [&]<typename T>() {
    const T* id = ids.data<T>();
    for (int64_t i = 0; i < bt; ++i) {
      const T* tok = wte.data<T>() + token_id(id, i, vocab) * c;
      T* out = y.data<T>() + i * c;
      if (!wpe.defined()) {
        std::copy_n(tok, c, out);
        continue;
      }
      const T* pos = wpe.data<T>() + (i % t_len) * c;
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
      for (int64_t j = 0; j < c; ++j) tok[j] += g[j];
      if (!dwpe.defined()) continue;
      T* pos = dwpe.data<T>() + (i % t_len) * c;
      for (int64_t j = 0; j < c; ++j) pos[j] += g[j];
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

void attention_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& probs,
                       const Tensor& out) {
  const HeadLayout l = head_layout(qkv, heads, kv_heads, "attention_forward");
  const int64_t b_n = qkv.shape()[0], t_len = qkv.shape()[1], c3 = l.row(), cq = l.q_width(), d = l.d;
  HPC_ASSERT(out.count() == b_n * t_len * cq && probs.count() >= b_n * heads * t_len * t_len,
             "attention_forward: shapes");
  dispatch_float(out.dtype(), "attention_forward", [&]<typename T>() {
    const T inv_sqrt_d = T(1.0 / std::sqrt(double(d)));
    for (int64_t b = 0; b < b_n; ++b) {
      const T* row0 = qkv.data<T>() + b * t_len * c3;
      const T* kt = nullptr;
      for (int64_t h = 0; h < heads; ++h) {
        const T* q = row0 + l.q(h);
        const T* v = row0 + l.v(h);
        if (h % l.group() == 0) kt = transposed(row0 + l.k(h), t_len, d, c3);  // once per key head
        T* p = probs.data<T>() + (b * heads + h) * t_len * t_len;
        product<T>(t_len, t_len, d, inv_sqrt_d, q, c3, 1, kt, t_len, p, t_len,
                   Causal::LowerOut);  // S = Q·Kᵀ/√d
        kernel_table<T>().causal_softmax(p, t_len, t_len, 0);
        product<T>(t_len, d, t_len, T(1), p, t_len, 1, v, c3, out.data<T>() + b * t_len * cq + h * d, cq,
                   Causal::LowerA);  // O = P·V
      }
    }
  });
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        int64_t kv_heads, const Tensor& dqkv, const Tensor& scratch) {
  const HeadLayout l = head_layout(qkv, heads, kv_heads, "attention_backward");
  const int64_t b_n = qkv.shape()[0], t_len = qkv.shape()[1], c3 = l.row(), cq = l.q_width(), d = l.d;
  HPC_ASSERT(
      dqkv.count() == qkv.count() && dout.count() == b_n * t_len * cq && scratch.count() >= t_len * t_len,
      "attention_backward: shapes");
  dispatch_float(dqkv.dtype(), "attention_backward", [&]<typename T>() {
    const T inv_sqrt_d = T(1.0 / std::sqrt(double(d)));
    T* dp = scratch.data<T>();
    // A key/value head shared by a group: its first query head writes dK and
    // dV, the others' products go through this buffer and are added.
    thread_local std::vector<T> part;
    if (l.group() > 1) part.resize(size_t(t_len * d));
    for (int64_t b = 0; b < b_n; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const T* row0 = qkv.data<T>() + b * t_len * c3;
        T* drow0 = dqkv.data<T>() + b * t_len * c3;
        const T* q = row0 + l.q(h);
        const T* k = row0 + l.k(h);
        const T* v = row0 + l.v(h);
        T* dq = drow0 + l.q(h);
        T* dk = drow0 + l.k(h);
        T* dv = drow0 + l.v(h);
        const bool first = h % l.group() == 0;
        T* dk_out = first ? dk : part.data();
        T* dv_out = first ? dv : part.data();
        const int64_t ld_part = first ? c3 : d;
        const T* p = probs.data<T>() + (b * heads + h) * t_len * t_len;
        const T* dgo = dout.data<T>() + b * t_len * cq + h * d;
        // dP = dO·Vᵀ and dV = Pᵀ·dO.
        product<T>(t_len, t_len, d, T(1), dgo, cq, 1, transposed(v, t_len, d, c3), t_len, dp, t_len,
                   Causal::LowerOut);
        product<T>(t_len, d, t_len, T(1), p, 1, t_len, dgo, cq, dv_out, ld_part, Causal::UpperA);
        if (!first) add_rows(part.data(), t_len, d, dv, c3);
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
        product<T>(t_len, d, t_len, inv_sqrt_d, dp, 1, t_len, q, c3, dk_out, ld_part, Causal::UpperA);
        if (!first) add_rows(part.data(), t_len, d, dk, c3);
      }
  });
}

void attention_decode(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& k_cache,
                      const Tensor& v_cache, int64_t pos, const Tensor& out) {
  const HeadLayout l = head_layout(qkv, heads, kv_heads, "attention_decode");
  const int64_t n = qkv.count() / l.row(), kvw = kv_heads * l.d, len = pos + n, c3 = l.row(), d = l.d;
  HPC_ASSERT(qkv.shape()[0] == 1 && out.count() == n * l.q_width() && k_cache.shape()[1] == kvw &&
                 v_cache.shape() == k_cache.shape() && k_cache.shape()[0] >= len && pos >= 0,
             "attention_decode: shapes");
  dispatch_float(out.dtype(), "attention_decode", [&]<typename T>() {
    const T* x = qkv.data<T>();
    T *kc = k_cache.data<T>(), *vc = v_cache.data<T>();
    for (int64_t i = 0; i < n; ++i) {  // the new positions' keys and values into the cache
      std::copy_n(x + i * c3 + l.k(0), kvw, kc + (pos + i) * kvw);
      std::copy_n(x + i * c3 + l.v(0), kvw, vc + (pos + i) * kvw);
    }
    thread_local std::vector<T> scores;
    scores.resize(size_t(n * len));
    const T inv_sqrt_d = T(1.0 / std::sqrt(double(d)));
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / l.group();
      T* s = scores.data();
      // S = Q·Kᵀ/√d over the cache, then row i's causal softmax over s ≤ pos + i, then O = S·V.
      gemm_rows(false, true, n, len, d, inv_sqrt_d, x + l.q(h), c3, kc + g * d, kvw, T(0), s, len);
      kernel_table<T>().causal_softmax(s, n, len, pos);  // row i sees positions ≤ pos + i
      gemm_rows(false, false, n, d, len, T(1), s, len, vc + g * d, kvw, T(0), out.data<T>() + h * d,
                l.q_width());
    }
  });
}

}  // namespace hpc::backend::cpu
