// The generic kernels (kernel_table.h): plain C++ loops, the reference that
// every instruction set's table reproduces bit for bit.
//
// Each body states its order of operations exactly, so that a vector body can
// follow it lane by lane: element-wise rules, and sums with a fixed set of
// partial sums and a fixed tree at the end. Where a vector body fuses a
// multiply and an add (FMA), the body here calls fmadd(), which rounds once
// too. Float64 runs the same loops, except where a float32 body exists for
// speed: GELU, the softmax and cross-entropy rows take exp_ref (the vector
// bodies' exp, one lane) in float32 and std::exp in float64, and the products
// run in OpenBLAS in float64 (gradient checks).
//
// The bodies are [[gnu::always_inline]] templates: generic.cpp instantiates
// them for the generic tables, and isa/avx512.cpp inlines the same source into
// functions compiled for AVX-512, so one source gives both tables.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/isa/kernel_table.h"
#include "kernels/activation_math.h"
#include "kernels/loss_math.h"
#include "kernels/optim_math.h"

namespace hpc::backend::cpu::generic {

// ---- float32 arithmetic of the vector bodies, one lane ---------------------------------

// Whether the build's baseline fuses a·b + c (ARCH_FLAGS x86-64-v3 or later): the ISA
// tables exist only then, and fmadd() rounds once as their FMA instructions do. Without it
// fmadd() rounds twice (a libm fmaf per element would be slow), and generic is the only table.
#if defined(__FMA__)
inline constexpr bool BASELINE_FMA = true;
#else
inline constexpr bool BASELINE_FMA = false;
#endif

[[gnu::always_inline]] inline float fmadd(float a, float b, float c) {
  if constexpr (BASELINE_FMA)
    return std::fma(a, b, c);
  else
    return a * b + c;
}

// exp(x) in float32, as the vector bodies compute it (avx2_math.h's exp8, avx512.cpp's
// exp16), one lane. Why not std::exp: glibc's expf is a scalar call per element (GCC uses
// libmvec only under -ffast-math); in a GPT step GELU alone cost ~11% that way. The classic
// Cephes range reduction x = n·ln2 + r (|r| ≤ ln2/2, ln2 in two parts so that n·ln2 is
// exact), a degree-6 polynomial for eʳ, 2ⁿ built in the exponent bits: ≤ 1.03 ulp from the
// correctly rounded result (tests/unit/test_cpu_vec_math.cpp), NaN in → NaN out, a pure
// function of its input. x is clamped to [-87.3, 88.3] (2ⁿ stays a normal float): below,
// the result is ~1e-38 instead of 0, above 2.2e38 instead of +inf; GELU and the softmax
// only divide by 1 + exp or normalise by a total ≥ 1, where that is below a float's resolution.
[[gnu::always_inline]] inline float exp_ref(float x) {
  float xc = x > -87.3f ? x : -87.3f;  // MAXPS(x, lo): lo for a NaN x, restored at the end
  xc = xc < 88.3f ? xc : 88.3f;
  const float shifter = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer (to nearest even)
  const float n = fmadd(xc, 1.44269504088896341f, shifter) - shifter;
  float r = fmadd(-n, 0.693359375f, xc);
  r = fmadd(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmadd(p, r, 1.3981999507e-3f);
  p = fmadd(p, r, 8.3334519073e-3f);
  p = fmadd(p, r, 4.1665795894e-2f);
  p = fmadd(p, r, 1.6666665459e-1f);
  p = fmadd(p, r, 5.0000001201e-1f);
  p = fmadd(p * r, r, r) + 1.0f;  // 1 + r + p·r²
  const float two_n = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float y = p * two_n;
  return x != x ? x : y;  // NaN stays NaN
}

// ---- activations ----------------------------------------------------------------------

// kernels/activation_math.h's GELU; in float32 with exp_ref, the products in the vector bodies' order.
[[gnu::always_inline]] inline float gelu_value(float v) {
  const float k = float(kernels::GELU_SQRT_2_OVER_PI), c = float(kernels::GELU_CUBIC);
  const float u = k * fmadd((c * v) * v, v, v);
  return v / (1.0f + exp_ref(-2.0f * u));
}

[[gnu::always_inline]] inline float gelu_grad_value(float v, float g) {
  const float k = float(kernels::GELU_SQRT_2_OVER_PI), c = float(kernels::GELU_CUBIC);
  const float k2 = float(-2 * kernels::GELU_SQRT_2_OVER_PI), c3 = float(3 * kernels::GELU_CUBIC);
  const float v2 = v * v;
  const float s = 1.0f / (1.0f + exp_ref(k2 * fmadd(c * v2, v, v)));
  const float du = k * fmadd(c3, v2, 1.0f);
  const float slope = ((2.0f * v) * s) * ((1.0f - s) * du);
  return g * (s + slope);
}

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>)
      y[i] = gelu_value(x[i]);
    else
      y[i] = kernels::gelu_forward(x[i]);
  }
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>)
      dx[i] = gelu_grad_value(x[i], dy[i]);
    else
      dx[i] = kernels::gelu_backward(x[i], dy[i]);
  }
}

// ---- attention ------------------------------------------------------------------------

// row[0, n) = softmax(row[0, n)), max-subtracted. Float32: the exps summed in eight partial
// sums (element s into s mod 8) over whole groups of eight, the tree ((0+4)+(2+6)) + ((1+5)+(3+7)),
// then the rest in order: an 8-lane body's register and its horizontal add. The maximum is exact
// in any order (a NaN in row[0] stays, later ones are skipped; only the sign of a ±0 tie can
// differ between orders, which no exp(x − max) sees).
template <typename T>
void softmax_row(T* row, int64_t n) {
  T mx = row[0];
  for (int64_t s = 1; s < n; ++s) mx = std::max(mx, row[s]);
  T total = 0;
  if constexpr (std::is_same_v<T, float>) {
    float part[8] = {};
    int64_t s = 0;
    for (; s + 8 <= n; s += 8)
      for (int l = 0; l < 8; ++l) {
        const float e = exp_ref(row[s + l] - mx);
        row[s + l] = e;
        part[l] += e;
      }
    total = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    for (; s < n; ++s) {
      const float e = exp_ref(row[s] - mx);
      row[s] = e;
      total += e;
    }
  } else {
    for (int64_t s = 0; s < n; ++s) {
      row[s] = std::exp(row[s] - mx);
      total += row[s];
    }
  }
  const T inv = T(1) / total;
  for (int64_t s = 0; s < n; ++s) row[s] *= inv;
}

template <typename T>
void causal_softmax(T* p, int64_t rows, int64_t t_len, int64_t offset) {
  for (int64_t t = 0; t < rows; ++t) {
    T* row = p + t * t_len;
    softmax_row(row, t + offset + 1);
    std::fill_n(row + t + offset + 1, t_len - t - offset - 1, T(0));
  }
}

// C = alpha·(A·B) in OpenBLAS, on the whole matrices (the causal zeros included).
template <typename T>
void blas_product(int64_t m, int64_t n, int64_t k, T alpha, StridedA<T> a, const T* b, int64_t ldb, T* c,
                  int64_t ldc) {
  // A single row (or column) of A has both strides 1; BLAS still wants a leading dimension that
  // covers the row (k, or m for Aᵀ), though it never steps by it.
  const bool a_by_rows = a.col_stride == 1 && (m == 1 || a.row_stride >= k);
  const int64_t lda = a_by_rows ? (m == 1 ? std::max<int64_t>(k, 1) : a.row_stride)
                                : (k == 1 ? std::max<int64_t>(m, 1) : a.col_stride);
  const auto op_a = a_by_rows ? CblasNoTrans : CblasTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, op_a, CblasNoTrans, int(m), int(n), int(k), alpha, a.data, int(lda), b,
                int(ldb), 0.0f, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, op_a, CblasNoTrans, int(m), int(n), int(k), alpha, a.data, int(lda), b,
                int(ldb), 0.0, c, int(ldc));
}

// The register tiles' arithmetic one element at a time: C(i, j) = alpha·(FMA chain over k in
// order), the terms the causal pattern zeroes left out, the unwanted columns of LowerOut unwritten.
inline void reference_product(int64_t m, int64_t n, int64_t k, float alpha, StridedA<float> a, const float* b,
                              int64_t ldb, float* c, int64_t ldc, Causal causal) {
  for (int64_t i = 0; i < m; ++i) {
    const int64_t k_begin = causal == Causal::UpperA ? std::min(k, i) : 0;
    const int64_t k_end = causal == Causal::LowerA ? std::min(k, i + 1) : k;
    const int64_t cols = causal == Causal::LowerOut ? std::min(n, i + 1) : n;
    float* ci = c + i * ldc;
    std::fill_n(ci, cols, 0.0f);
    for (int64_t kk = k_begin; kk < k_end; ++kk) {
      const float aik = a.data[i * a.row_stride + kk * a.col_stride];
      const float* bk = b + kk * ldb;
      for (int64_t j = 0; j < cols; ++j) ci[j] = fmadd(aik, bk[j], ci[j]);
    }
    for (int64_t j = 0; j < cols; ++j) ci[j] = alpha * ci[j];
  }
}

template <typename T>
void tile_product(int64_t m, int64_t n, int64_t k, T alpha, StridedA<T> a, const T* b, int64_t ldb, T* c,
                  int64_t ldc, Causal causal) {
  if constexpr (std::is_same_v<T, float> && BASELINE_FMA)
    reference_product(m, n, k, alpha, a, b, ldb, c, ldc, causal);
  else
    blas_product(m, n, k, alpha, a, b, ldb, c, ldc);  // float32 without FMA: OpenBLAS's runtime kernels
}

template <typename T>
void transpose(const T* x, int64_t rows, int64_t cols, int64_t ld, T* out) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = x[i * ld + j];
}

// ---- loss -----------------------------------------------------------------------------

// A float32 cross-entropy row's loss and gradient from its maximum m, Σ exp(z − m), Σ z, and
// dz holding the exps: kernels::softmax_xent_row<double>'s formulas, the exps in float.
[[gnu::always_inline]] inline double xent_from_exps(const float* z, int64_t k, int32_t label,
                                                    double smoothing, double grad_scale, float* dz, float m,
                                                    double exps, double logits) {
  const double lse = double(m) + std::log(exps);
  const double off = smoothing / double(k), on = 1 - smoothing;
  if (dz != nullptr) {
    const double inv = 1 / exps;
    for (int64_t j = 0; j < k; ++j) dz[j] = float(grad_scale * (double(dz[j]) * inv - off));
    dz[label] = float(double(dz[label]) - grad_scale * on);
  }
  return lse - on * double(z[label]) - off * logits;
}

// Float32: one exp_ref per logit (two double exps per logit were ~1.5% of a gpt-small step),
// summed in double in eight partial sums (logit j into j mod 8), then in lane order.
template <typename T>
double xent_row(const T* z, int64_t k, int32_t label, double smoothing, double grad_scale, T* dz) {
  if constexpr (std::is_same_v<T, double>) {
    return kernels::softmax_xent_row<double>(z, k, label, smoothing, grad_scale, dz);
  } else {
    float m = z[0];
    for (int64_t j = 1; j < k; ++j) m = z[j] > m ? z[j] : m;
    double part[8] = {}, logits = 0;
    for (int64_t j = 0; j < k; j += 8) {
      const int64_t lanes = std::min<int64_t>(8, k - j);
      for (int64_t l = 0; l < lanes; ++l) {
        const float e = exp_ref(z[j + l] - m);
        if (dz != nullptr) dz[j + l] = e;
        part[l] += double(e);
      }
      for (int64_t l = 0; l < lanes; ++l) logits += double(z[j + l]);
    }
    double exps = 0;
    for (const double p : part) exps += p;
    return xent_from_exps(z, k, label, smoothing, grad_scale, dz, m, exps, logits);
  }
}

// ---- BatchNorm: plain rows ------------------------------------------------------------

// Σ u and Σ u·v over a row with u = a, v = b − shift, in double. A single accumulator is a
// serial chain the compiler may not reorder (strict IEEE), so it cannot vectorise, and GCC's
// SLP pass does not reliably find the multi-accumulator form either; GCC/Clang vector types
// say it directly: 2×4 double lanes, float → double four at a time (6× faster).
using Double4 = double __attribute__((vector_size(32)));

template <typename T>
[[gnu::always_inline]] inline Double4 load4(const T* p) {
  return Double4{double(p[0]), double(p[1]), double(p[2]), double(p[3])};
}

template <typename T>
[[gnu::always_inline]] inline void bn_row_sums(const T* a, const T* b, T shift, int64_t n, double* sum_u,
                                               double* sum_uv) {
  Double4 su0 = {}, su1 = {}, suv0 = {}, suv1 = {};
  const double ds = double(shift);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const Double4 u0 = load4(a + k), u1 = load4(a + k + 4);
    su0 += u0;
    su1 += u1;
    suv0 += u0 * (load4(b + k) - ds);
    suv1 += u1 * (load4(b + k + 4) - ds);
  }
  double tail_u = 0, tail_uv = 0;
  for (; k < n; ++k) {
    tail_u += double(a[k]);
    tail_uv += double(a[k]) * (double(b[k]) - ds);
  }
  const Double4 su = su0 + su1, suv = suv0 + suv1;
  *sum_u += (su[0] + su[1]) + (su[2] + su[3]) + tail_u;
  *sum_uv += (suv[0] + suv[1]) + (suv[2] + suv[3]) + tail_uv;
}

// The normalised value y = (x − mean)·gain + beta, gain = gamma·invstd: one expression for
// every normalise and relu-mask loop, so that a fused relu's mask is taken from the very value
// forward wrote.
template <typename T>
[[gnu::always_inline]] inline T bn_value(T x, T mu, T gain, T shift) {
  return (x - mu) * gain + shift;
}

template <bool Relu, typename T>
[[gnu::always_inline]] inline void normalize_row(const T* in, T* out, int64_t n, T mu, T gain, T shift) {
  for (int64_t k = 0; k < n; ++k) {
    const T v = bn_value(in[k], mu, gain, shift);
    out[k] = Relu ? kernels::relu_forward(v) : v;
  }
}

template <typename T>
[[gnu::always_inline]] inline void bn_normalize_row(const T* in, T* out, int64_t n, T mu, T gain, T shift,
                                                    bool relu) {
  relu ? normalize_row<true>(in, out, n, mu, gain, shift) : normalize_row<false>(in, out, n, mu, gain, shift);
}

template <typename T>
[[gnu::always_inline]] inline void bn_mask_row(const T* x, const T* dy, T* out, int64_t n, T mu, T gain,
                                               T shift) {
  for (int64_t k = 0; k < n; ++k) out[k] = kernels::relu_backward(bn_value(x[k], mu, gain, shift), dy[k]);
}

template <typename T>
[[gnu::always_inline]] inline void bn_dx_row(const T* x, const T* dy, T* dx, int64_t n, T k1, T k2, T k3,
                                             T mu) {
  for (int64_t k = 0; k < n; ++k) dx[k] = k1 * dy[k] + k2 * (x[k] - mu) + k3;
}

// ---- BatchNorm: channel-blocked float32 activations ([N, C/B, S, B], core/tensor.h) ----
// Lane l of block cb is channel cb·B + l, so each position holds one vector of B channels,
// and every loop runs over positions with per-lane constants. The sums keep one double
// accumulator per channel and sample (another order of additions than the plain rows' eight
// partial sums: the two layouts agree to rounding, each repeats bit for bit).
constexpr int LANES = 8;  // one Double8 / Float8 register (AVX-512) per 8 channels
using Double8 = double __attribute__((vector_size(64)));
using Float8 = float __attribute__((vector_size(32)));

// Sixteen floats at p as two vectors of eight doubles. Widened as one vector: GCC widens that
// with two vcvtps2pd in AVX-512 code, but a vector of eight with two 4-wide conversions, an
// extract and an insert, which left the sums compute-bound at a third of the bandwidth.
[[gnu::always_inline]] inline void widen16(const float* p, Double8& lo, Double8& hi) {
  using Float16 = float __attribute__((vector_size(64)));
  using Double16 = double __attribute__((vector_size(128)));
  Float16 f;
  __builtin_memcpy(&f, p, sizeof f);
  const Double16 d = __builtin_convertvector(f, Double16);
  lo = __builtin_shufflevector(d, d, 0, 1, 2, 3, 4, 5, 6, 7);
  hi = __builtin_shufflevector(d, d, 8, 9, 10, 11, 12, 13, 14, 15);
}

// Eight floats at p as eight doubles.
[[gnu::always_inline]] inline void widen8(const float* p, Double8& out) {
  Float8 f;
  __builtin_memcpy(&f, p, sizeof f);
  out = __builtin_convertvector(f, Double8);
}

// A block's B floats at p as B / LANES vectors of eight doubles (a block of sixteen through widen16).
template <int B>
[[gnu::always_inline]] inline void widen_block(const float* p, Double8 (&out)[B / LANES]) {
  if constexpr (B == 16) {
    widen16(p, out[0], out[1]);
  } else {
    for (int v = 0; v < B / LANES; ++v) widen8(p + v * LANES, out[v]);
  }
}

// A fused relu's constants for one block's lanes (ReluMask at the block's first channel),
// copied into locals so that the compiler keeps them in registers: the output cannot alias them.
template <int B>
struct LaneMask {
  float mu[B], gain[B], shift[B];
  [[gnu::always_inline]] LaneMask(const ReluMask<float>* r, int64_t c) {
    for (int l = 0; l < B; ++l) {
      mu[l] = r ? r->mu[c + l] : 0.0f;
      gain[l] = r ? r->gain[c + l] : 0.0f;
      shift[l] = r ? r->shift[c + l] : 0.0f;
    }
  }
  // dy where the normalised x is > 0, else 0.
  [[gnu::always_inline]] float masked(float x, float dy, int l) const {
    return kernels::relu_backward(bn_value(x, mu[l], gain[l], shift[l]), dy);
  }
};

// sum_u[l] += Σ_s u[s, l] and sum_uv[l] += Σ_s u[s, l]·(b[s, l] − shift[l]) over one block of
// one sample, u = a, or with Relu a masked by the normalised b (a = dy, b = x).
template <int B, bool Relu>
[[gnu::always_inline]] inline void block_sums(const float* a, const float* b, const float* shift,
                                              int64_t spatial, double* sum_u, double* sum_uv,
                                              const LaneMask<B>& m) {
  constexpr int V = B / LANES;
  Double8 su[V] = {}, suv[V] = {}, sh[V];
  for (int v = 0; v < V; ++v) widen8(shift + v * LANES, sh[v]);
  for (int64_t s = 0; s < spatial; ++s) {
    const float* as = a + s * B;
    float masked[B];
    if constexpr (Relu) {
      for (int l = 0; l < B; ++l) masked[l] = m.masked(b[s * B + l], as[l], l);
      as = masked;
    }
    Double8 u[V], w[V];
    widen_block<B>(as, u);
    widen_block<B>(b + s * B, w);
    for (int v = 0; v < V; ++v) {
      su[v] += u[v];
      suv[v] += u[v] * (w[v] - sh[v]);
    }
  }
  for (int v = 0; v < V; ++v)
    for (int l = 0; l < LANES; ++l) {
      sum_u[v * LANES + l] += su[v][l];
      sum_uv[v * LANES + l] += suv[v][l];
    }
}

// out[s, l] = k1[l]·u[s, l] + k2[l]·(b[s, l] − mu[l]) + k3[l] over one block of one sample
// (dx: u = a = dy, or with Relu dy masked by the normalised b = x).
template <int B, bool Relu>
[[gnu::always_inline]] inline void block_affine(const float* a, const float* b, float* out, int64_t spatial,
                                                const float* k1p, const float* k2p, const float* k3p,
                                                const float* mup, const LaneMask<B>& m) {
  float k1[B], k2[B], k3[B], mu[B];
  for (int l = 0; l < B; ++l) k1[l] = k1p[l], k2[l] = k2p[l], k3[l] = k3p[l], mu[l] = mup[l];
  for (int64_t s = 0; s < spatial; ++s)
    for (int l = 0; l < B; ++l) {
      const float u = Relu ? m.masked(b[s * B + l], a[s * B + l], l) : a[s * B + l];
      out[s * B + l] = k1[l] * u + k2[l] * (b[s * B + l] - mu[l]) + k3[l];
    }
}

// normalize_row with per-lane constants, over one block of one sample.
template <int B, bool Relu>
[[gnu::always_inline]] inline void block_normalize(const float* x, float* out, int64_t spatial,
                                                   const float* mup, const float* gainp,
                                                   const float* shiftp) {
  float mu[B], gain[B], shift[B];
  for (int l = 0; l < B; ++l) mu[l] = mup[l], gain[l] = gainp[l], shift[l] = shiftp[l];
  for (int64_t s = 0; s < spatial; ++s)
    for (int l = 0; l < B; ++l) {
      const float v = bn_value(x[s * B + l], mu[l], gain[l], shift[l]);
      out[s * B + l] = Relu ? kernels::relu_forward(v) : v;
    }
}

// The three blocked kernels over every (sample, block), for the shape's block (8 or 16) and relu.
template <int B, bool Relu>
[[gnu::always_inline]] inline void blocked_sums_loop(const BlockedShape& s, const float* a, const float* b,
                                                     const float* shift, double* sum_u, double* sum_uv,
                                                     const ReluMask<float>* relu) {
  for (int64_t n = 0; n < s.samples; ++n)
    for (int64_t cb = 0; cb < s.blocks; ++cb) {
      const int64_t at = (n * s.blocks + cb) * s.spatial * B, c = cb * B;
      const LaneMask<B> m(relu, c);
      block_sums<B, Relu>(a + at, b + at, shift + c, s.spatial, sum_u + c, sum_uv + c, m);
    }
}

[[gnu::always_inline]] inline void bn_blocked_sums(const BlockedShape& s, const float* a, const float* b,
                                                   const float* shift, double* sum_u, double* sum_uv,
                                                   const ReluMask<float>* relu) {
  if (s.block == 16)
    relu ? blocked_sums_loop<16, true>(s, a, b, shift, sum_u, sum_uv, relu)
         : blocked_sums_loop<16, false>(s, a, b, shift, sum_u, sum_uv, relu);
  else
    relu ? blocked_sums_loop<8, true>(s, a, b, shift, sum_u, sum_uv, relu)
         : blocked_sums_loop<8, false>(s, a, b, shift, sum_u, sum_uv, relu);
}

template <int B, bool Relu>
[[gnu::always_inline]] inline void blocked_affine_loop(const BlockedShape& s, const float* a, const float* b,
                                                       float* out, const float* k1, const float* k2,
                                                       const float* k3, const float* mu,
                                                       const ReluMask<float>* relu) {
  for (int64_t n = 0; n < s.samples; ++n)
    for (int64_t cb = 0; cb < s.blocks; ++cb) {
      const int64_t at = (n * s.blocks + cb) * s.spatial * B, c = cb * B;
      const LaneMask<B> m(relu, c);
      block_affine<B, Relu>(a + at, b + at, out + at, s.spatial, k1 + c, k2 + c, k3 + c, mu + c, m);
    }
}

[[gnu::always_inline]] inline void bn_blocked_affine(const BlockedShape& s, const float* a, const float* b,
                                                     float* out, const float* k1, const float* k2,
                                                     const float* k3, const float* mu,
                                                     const ReluMask<float>* relu) {
  if (s.block == 16)
    relu ? blocked_affine_loop<16, true>(s, a, b, out, k1, k2, k3, mu, relu)
         : blocked_affine_loop<16, false>(s, a, b, out, k1, k2, k3, mu, relu);
  else
    relu ? blocked_affine_loop<8, true>(s, a, b, out, k1, k2, k3, mu, relu)
         : blocked_affine_loop<8, false>(s, a, b, out, k1, k2, k3, mu, relu);
}

template <int B, bool Relu>
[[gnu::always_inline]] inline void blocked_normalize_loop(const BlockedShape& s, const float* x, float* out,
                                                          const float* mu, const float* gain,
                                                          const float* shift) {
  for (int64_t n = 0; n < s.samples; ++n)
    for (int64_t cb = 0; cb < s.blocks; ++cb) {
      const int64_t at = (n * s.blocks + cb) * s.spatial * B, c = cb * B;
      block_normalize<B, Relu>(x + at, out + at, s.spatial, mu + c, gain + c, shift + c);
    }
}

[[gnu::always_inline]] inline void bn_blocked_normalize(const BlockedShape& s, const float* x, float* out,
                                                        const float* mu, const float* gain,
                                                        const float* shift, bool relu) {
  if (s.block == 16)
    relu ? blocked_normalize_loop<16, true>(s, x, out, mu, gain, shift)
         : blocked_normalize_loop<16, false>(s, x, out, mu, gain, shift);
  else
    relu ? blocked_normalize_loop<8, true>(s, x, out, mu, gain, shift)
         : blocked_normalize_loop<8, false>(s, x, out, mu, gain, shift);
}

// ---- optimizer ------------------------------------------------------------------------

// The coefficients were built once per call (kernels::make_adam_coeffs), so the body is pure
// T arithmetic and vectorises at -O3.
template <typename T>
[[gnu::always_inline]] inline void adam(T* p, T* m, T* v, const T* g, int64_t n,
                                        const kernels::AdamCoeffs<T>& c) {
  for (int64_t i = 0; i < n; ++i) kernels::adam_update(p[i], m[i], v[i], g[i], c);
}

// ---- bias -----------------------------------------------------------------------------

// Σ term(p[i]) over i < n in double with 16 independent partial sums (a fixed order, so the
// same result on every run) that map onto vector registers: a single running total would
// serialise on the add latency. 16 doubles are four AVX2 accumulators, enough to hide the FMA
// latency: a gradient norm over the mlp preset's 670k parameters takes 65 µs instead of 117 µs with 8.
template <typename T, typename F>
[[gnu::always_inline]] inline double reduce16(const T* p, int64_t n, F term) {
  constexpr int64_t WAYS = 16;
  double acc[WAYS] = {};
  int64_t i = 0;
  for (; i + WAYS <= n; i += WAYS)
    for (int64_t j = 0; j < WAYS; ++j) acc[j] += term(double(p[i + j]));
  for (; i < n; ++i) acc[0] += term(double(p[i]));
  double s = 0;
  for (const double a : acc) s += a;
  return s;
}

template <typename T>
[[gnu::always_inline]] inline void bias_add_rows(T* y, const T* b, int64_t rows, int64_t channels,
                                                 int64_t spatial) {
  if (spatial == 1) {  // a fully connected layer's [N, J]: vectorise along the row, not over one element
    for (int64_t r = 0; r < rows; ++r) {
      T* row = y + r * channels;
      for (int64_t c = 0; c < channels; ++c) row[c] += b[c];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      T* run = y + (r * channels + c) * spatial;
      for (int64_t s = 0; s < spatial; ++s) run[s] += b[c];
    }
}

// Rows outer, contiguous runs inner: streams through dy once; each run is summed with
// reduce16's partial sums (a serial loop over a convolution's H·W run was 5% of a cnn step).
template <typename T>
[[gnu::always_inline]] inline void bias_sums(const T* g, double* acc, int64_t rows, int64_t channels,
                                             int64_t spatial) {
  if (spatial == 1) {  // [N, J]: the same additions in the same order, vectorised across channels
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = g + r * channels;
      for (int64_t c = 0; c < channels; ++c) acc[c] += double(row[c]);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c)
      acc[c] += reduce16(g + (r * channels + c) * spatial, spatial, [](double v) { return v; });
}

// ---- RMSNorm and SwiGLU (kernels/llama_math.h's arithmetic) ----------------------------

// a·b + c: fused in float32 as the vector bodies do (fmadd), plain in float64.
template <typename T>
[[gnu::always_inline]] inline T fma_t(T a, T b, T c) {
  if constexpr (std::is_same_v<T, float>)
    return fmadd(a, b, c);
  else
    return a * b + c;
}

// Σx² in double: sixteen partial sums (element j into j mod 16) over whole groups of sixteen,
// the tree ((p_l + p_4+l) + (p_8+l + p_12+l)) per l, then ((s0 + s1) + (s2 + s3)) + the rest in
// order: four 4-lane registers of doubles (AVX2) and their horizontal add.
template <typename T>
T rms_row(const T* x, const T* w, int64_t n, double eps, T* y) {
  double p[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) p[l] = std::fma(double(x[j + l]), double(x[j + l]), p[l]);
  double tail = 0;
  for (; j < n; ++j) tail = std::fma(double(x[j]), double(x[j]), tail);
  double s[4];
  for (int l = 0; l < 4; ++l) s[l] = (p[l] + p[4 + l]) + (p[8 + l] + p[12 + l]);
  const double sum_sq = ((s[0] + s[1]) + (s[2] + s[3])) + tail;
  const T rs = T(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (j = 0; j < n; ++j) y[j] = w[j] * (x[j] * rs);
  return rs;
}

// Σ g·x̂ in 32 partial sums (j mod 32), the tree (p_l + p_8+l) + (p_16+l + p_24+l) per l, then
// (((s0+s1) + (s2+s3)) + ((s4+s5) + (s6+s7))) + the rest: four 8-lane registers and sum8's order.
template <typename T>
void rms_backward_row(const T* x, const T* dy, const T* w, T rs, int64_t n, T* dx, bool accumulate, T* dw) {
  T p[32] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int l = 0; l < 32; ++l) p[l] = fma_t(w[j + l] * dy[j + l], x[j + l] * rs, p[l]);
  T tail = 0;
  for (; j < n; ++j) tail = fma_t(w[j] * dy[j], x[j] * rs, tail);
  T s[8];
  for (int l = 0; l < 8; ++l) s[l] = (p[l] + p[8 + l]) + (p[16 + l] + p[24 + l]);
  const T dot = (((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))) + tail;
  const T mean_gx = dot / T(n);
  for (j = 0; j < n; ++j) {
    const T xh = x[j] * rs;
    dw[j] = fma_t(dy[j], xh, dw[j]);
    if (dx == nullptr) continue;
    const T v = rs * fma_t(-xh, mean_gx, w[j] * dy[j]);
    dx[j] = accumulate ? dx[j] + v : v;
  }
}

// σ(g) = 1/(1 + exp(−g)): exp_ref in float32, std::exp in float64.
template <typename T>
[[gnu::always_inline]] inline T sigmoid(T g) {
  if constexpr (std::is_same_v<T, float>)
    return 1.0f / (1.0f + exp_ref(-g));
  else
    return T(1) / (T(1) + std::exp(-g));
}

template <typename T>
void swiglu_row(const T* gate, const T* up, T* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = (gate[j] * sigmoid(gate[j])) * up[j];
}

template <typename T>
void swiglu_backward_row(const T* gate, const T* up, const T* dout, T* dgate, T* dup, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const T g = gate[j], s = sigmoid(g);
    dgate[j] = (dout[j] * up[j]) * (s * fma_t(g, T(1) - s, T(1)));
    dup[j] = dout[j] * (g * s);
  }
}

}  // namespace hpc::backend::cpu::generic
