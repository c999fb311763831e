// The float32 bodies of the Llama pieces (see llama_kernels.h): generic
// loops, AVX2 and AVX-512, each a separate function; the tables at the end.
#include "backend/cpu/llama_kernels.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/simd.h"
#include "backend/cpu/vec_math.h"

namespace hpc::backend::cpu::llama {

float exp_scalar(float x) {
  if (std::isnan(x)) return x;
  // max/min as MAXPS/MINPS give them for a non-NaN x.
  float xc = x > -87.3f ? x : -87.3f;
  xc = xc < 88.3f ? xc : 88.3f;
  const float shifter = 12582912.0f;
  const float n = std::fma(xc, 1.44269504088896341f, shifter) - shifter;
  float r = std::fma(-n, 0.693359375f, xc);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r) + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

namespace {

// ---- generic: the reference loops ---------------------------------------------------

float rmsnorm_row_generic(const float* x, const float* w, int64_t n, double eps, float* y) {
  double p[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) p[l] = std::fma(double(x[j + l]), double(x[j + l]), p[l]);
  double tail = 0;
  for (; j < n; ++j) tail = std::fma(double(x[j]), double(x[j]), tail);
  double s[4];
  for (int l = 0; l < 4; ++l) s[l] = (p[l] + p[4 + l]) + (p[8 + l] + p[12 + l]);
  const double sum_sq = ((s[0] + s[1]) + (s[2] + s[3])) + tail;
  const float rs = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  for (j = 0; j < n; ++j) y[j] = w[j] * (x[j] * rs);
  return rs;
}

void rmsnorm_backward_row_generic(const float* x, const float* dy, const float* w, float rs, int64_t n,
                                  float* dx, bool accumulate, float* dw) {
  float p[32] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int l = 0; l < 32; ++l) p[l] = std::fma(w[j + l] * dy[j + l], x[j + l] * rs, p[l]);
  float tail = 0;
  for (; j < n; ++j) tail = std::fma(w[j] * dy[j], x[j] * rs, tail);
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = (p[l] + p[8 + l]) + (p[16 + l] + p[24 + l]);
  const float dot = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
  const float mean_gx = dot / float(n);
  for (j = 0; j < n; ++j) {
    const float xh = x[j] * rs;
    dw[j] = std::fma(dy[j], xh, dw[j]);
    if (!dx) continue;
    const float v = rs * std::fma(-xh, mean_gx, w[j] * dy[j]);
    dx[j] = accumulate ? dx[j] + v : v;
  }
}

void swiglu_forward_generic(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const float s = 1.0f / (1.0f + exp_scalar(-gate[j]));
    out[j] = (gate[j] * s) * up[j];
  }
}

void swiglu_backward_generic(const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                             int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const float g = gate[j], s = 1.0f / (1.0f + exp_scalar(-g));
    dgate[j] = (dout[j] * up[j]) * (s * std::fma(g, 1.0f - s, 1.0f));
    dup[j] = dout[j] * (g * s);
  }
}

const Kernels GENERIC{"generic", rmsnorm_row_generic, rmsnorm_backward_row_generic, swiglu_forward_generic,
                      swiglu_backward_generic};

#if HPC_CPU_VEC_EXP

// ---- AVX2 ------------------------------------------------------------------------------

float rmsnorm_row_avx2(const float* x, const float* w, int64_t n, double eps, float* y) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int v = 0; v < 4; ++v) {
      const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + j + 4 * v));
      acc[v] = _mm256_fmadd_pd(d, d, acc[v]);
    }
  double tail = 0;
  for (int64_t i = j; i < n; ++i) tail = std::fma(double(x[i]), double(x[i]), tail);
  alignas(32) double s[4];
  _mm256_store_pd(s, _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
  const double sum_sq = ((s[0] + s[1]) + (s[2] + s[3])) + tail;
  const float rs = float(1.0 / std::sqrt(sum_sq / double(n) + eps));
  const __m256 r = _mm256_set1_ps(rs);
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_mul_ps(_mm256_loadu_ps(x + j), r)));
  for (; j < n; ++j) y[j] = w[j] * (x[j] * rs);
  return rs;
}

void rmsnorm_backward_row_avx2(const float* x, const float* dy, const float* w, float rs, int64_t n,
                               float* dx, bool accumulate, float* dw) {
  const __m256 r = _mm256_set1_ps(rs);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int v = 0; v < 4; ++v) {
      const int64_t k = j + 8 * v;
      const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(dy + k));
      acc[v] = _mm256_fmadd_ps(g, _mm256_mul_ps(_mm256_loadu_ps(x + k), r), acc[v]);
    }
  float tail = 0;
  for (int64_t i = j; i < n; ++i) tail = std::fma(w[i] * dy[i], x[i] * rs, tail);
  alignas(32) float s[8];
  _mm256_store_ps(s, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  const float dot = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
  const float mean_gx = dot / float(n);
  const __m256 m = _mm256_set1_ps(mean_gx);
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 d = _mm256_loadu_ps(dy + j), xh = _mm256_mul_ps(_mm256_loadu_ps(x + j), r);
    _mm256_storeu_ps(dw + j, _mm256_fmadd_ps(d, xh, _mm256_loadu_ps(dw + j)));
    if (!dx) continue;
    const __m256 v = _mm256_mul_ps(r, _mm256_fnmadd_ps(xh, m, _mm256_mul_ps(_mm256_loadu_ps(w + j), d)));
    _mm256_storeu_ps(dx + j, accumulate ? _mm256_add_ps(_mm256_loadu_ps(dx + j), v) : v);
  }
  for (; j < n; ++j) {
    const float xh = x[j] * rs;
    dw[j] = std::fma(dy[j], xh, dw[j]);
    if (!dx) continue;
    const float v = rs * std::fma(-xh, mean_gx, w[j] * dy[j]);
    dx[j] = accumulate ? dx[j] + v : v;
  }
}

__m256 sigmoid8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}

void swiglu_forward_avx2(const float* gate, const float* up, float* out, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 g = _mm256_loadu_ps(gate + j);
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), _mm256_loadu_ps(up + j)));
  }
  if (j == n) return;
  const __m256 g = load_partial(gate + j, n - j);
  store_partial(out + j, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), load_partial(up + j, n - j)), n - j);
}

void swiglu_grad8(__m256 g, __m256 u, __m256 d, __m256& dg, __m256& du) {
  const __m256 one = _mm256_set1_ps(1.0f), s = sigmoid8(g);
  dg = _mm256_mul_ps(_mm256_mul_ps(d, u), _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one)));
  du = _mm256_mul_ps(d, _mm256_mul_ps(g, s));
}

void swiglu_backward_avx2(const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                          int64_t n) {
  int64_t j = 0;
  __m256 dg, du;
  for (; j + 8 <= n; j += 8) {
    swiglu_grad8(_mm256_loadu_ps(gate + j), _mm256_loadu_ps(up + j), _mm256_loadu_ps(dout + j), dg, du);
    _mm256_storeu_ps(dgate + j, dg);
    _mm256_storeu_ps(dup + j, du);
  }
  if (j == n) return;
  const int64_t r = n - j;
  swiglu_grad8(load_partial(gate + j, r), load_partial(up + j, r), load_partial(dout + j, r), dg, du);
  store_partial(dgate + j, dg, r);
  store_partial(dup + j, du, r);
}

const Kernels AVX2{"avx2", rmsnorm_row_avx2, rmsnorm_backward_row_avx2, swiglu_forward_avx2,
                   swiglu_backward_avx2};

#if HPC_SIMD_AVX512

// ---- AVX-512: SwiGLU in sixteen lanes (exp16 is exp8 lane by lane); the tail
// through masked loads (zeros in the unused lanes, as load_partial pads) ------------------

HPC_AVX512 __m512 sigmoid16(__m512 g) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}

HPC_AVX512 void swiglu_forward_avx512(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + j);
    _mm512_mask_storeu_ps(out + j, m,
                          _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(g)), _mm512_maskz_loadu_ps(m, up + j)));
  }
}

HPC_AVX512 void swiglu_backward_avx512(const float* gate, const float* up, const float* dout, float* dgate,
                                       float* dup, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + j), u = _mm512_maskz_loadu_ps(m, up + j),
                 d = _mm512_maskz_loadu_ps(m, dout + j), s = sigmoid16(g);
    _mm512_mask_storeu_ps(
        dgate + j, m,
        _mm512_mul_ps(_mm512_mul_ps(d, u), _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one))));
    _mm512_mask_storeu_ps(dup + j, m, _mm512_mul_ps(d, _mm512_mul_ps(g, s)));
  }
}

// RMSNorm's rows stay AVX2's: a row of a few hundred floats is bound by its loads, not its lanes.
const Kernels AVX512{"avx512", rmsnorm_row_avx2, rmsnorm_backward_row_avx2, swiglu_forward_avx512,
                     swiglu_backward_avx512};
#endif
#endif

}  // namespace

const Kernels& generic_kernels() { return GENERIC; }

const Kernels& kernels() {
#if HPC_CPU_VEC_EXP
#if HPC_SIMD_AVX512
  if (simd::avx512()) return AVX512;
#endif
  return AVX2;
#else
  return GENERIC;
#endif
}

const Kernels* const* all_kernels(int* count) {
  static const Kernels* tables[3];
  int n = 0;
  tables[n++] = &GENERIC;
#if HPC_CPU_VEC_EXP
  tables[n++] = &AVX2;
#if HPC_SIMD_AVX512
  if (simd::avx512()) tables[n++] = &AVX512;
#endif
#endif
  *count = n;
  return tables;
}

}  // namespace hpc::backend::cpu::llama
