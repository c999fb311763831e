// The avx512 table (kernel_table.h): 16-lane GELU and SwiGLU, 12×32 register tiles for the attention's
// products, BatchNorm's plain row sums in one 8-lane register of doubles, and generic.h's loops
// (BatchNorm, Adam, the bias) compiled for AVX-512 through a function target attribute; the
// avx2 table's kernels for the rest. The same operations in the same order as generic.h, so the
// same bits. Built where the baseline has AVX2 and FMA and the compiler takes target attributes;
// run where the CPU has AVX-512F/BW/VL (kernel_table.cpp).
#include "backend/cpu/isa/generic.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__GNUC__) && defined(__x86_64__)

#include <immintrin.h>

#define HPC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace hpc::backend::cpu {

namespace {

// ---- exp and GELU in sixteen lanes: avx2_math.h's exp8 and avx2.cpp's GELU lane by lane ----

// The all-lanes masked forms of max, min, cvtps and slli: their plain forms
// pass GCC 12 an undefined vector that -Wmaybe-uninitialized reports.
HPC_AVX512 inline __m512 exp16(__m512 x) {
  constexpr __mmask16 all = 0xFFFF;
  const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
  const __m512 xc = _mm512_mask_min_ps(hi, all, _mm512_mask_max_ps(lo, all, x, lo), hi);
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512i ni = _mm512_add_epi32(_mm512_mask_cvtps_epi32(bias, all, n), bias);
  const __m512i e = _mm512_mask_slli_epi32(ni, all, ni, 23);
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

HPC_AVX512 __m512 gelu16(__m512 v) {
  const __m512 k = _mm512_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm512_set1_ps(float(kernels::GELU_CUBIC));
  const __m512 u = _mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(c, v), v), v, v));
  return _mm512_div_ps(v,
                       _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
}

HPC_AVX512 __m512 gelu_grad16(__m512 v, __m512 g) {
  const __m512 k2 = _mm512_set1_ps(float(-2 * kernels::GELU_SQRT_2_OVER_PI));
  const __m512 k = _mm512_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm512_set1_ps(float(kernels::GELU_CUBIC));
  const __m512 c3 = _mm512_set1_ps(float(3 * kernels::GELU_CUBIC));
  const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  const __m512 v2 = _mm512_mul_ps(v, v);
  const __m512 s = _mm512_div_ps(
      one, _mm512_add_ps(one, exp16(_mm512_mul_ps(k2, _mm512_fmadd_ps(_mm512_mul_ps(c, v2), v, v)))));
  const __m512 du = _mm512_mul_ps(k, _mm512_fmadd_ps(c3, v2, one));
  const __m512 slope =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(two, v), s), _mm512_mul_ps(_mm512_sub_ps(one, s), du));
  return _mm512_mul_ps(g, _mm512_add_ps(s, slope));
}

// The tail through masked loads and stores (zeros in the unused lanes).
HPC_AVX512 void gelu_forward(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 m = __mmask16((1u << (n - i)) - 1);
  _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
}

HPC_AVX512 void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dx + i, gelu_grad16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(dy + i)));
  if (i == n) return;
  const __mmask16 m = __mmask16((1u << (n - i)) - 1);
  _mm512_mask_storeu_ps(dx + i, m,
                        gelu_grad16(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, dy + i)));
}

// ---- the attention's products: 12 rows × 32 columns, 24 zmm accumulators, two for B, one for A ----
struct Tile12x32 {
  static constexpr int MR = 12, NR = 32;
  template <int R>
  HPC_AVX512 static void tile(const Tile& t) {
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t kk = t.kb; kk < t.ke; ++kk) {
      const float* bk = t.b + kk * t.ldb;
      const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16);
      const float* ak = t.a + kk * t.cs;
      for (int i = 0; i < R; ++i) {
        const __m512 ai = _mm512_set1_ps(ak[i * t.rs]);
        acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
    const __m512 alpha = _mm512_set1_ps(t.alpha);
    for (int i = 0; i < R; ++i) {
      _mm512_storeu_ps(t.c + i * t.ldc, _mm512_mul_ps(alpha, acc[i][0]));
      _mm512_storeu_ps(t.c + i * t.ldc + 16, _mm512_mul_ps(alpha, acc[i][1]));
    }
  }
};

void tile_product(int64_t m, int64_t n, int64_t k, float alpha, StridedA<float> a, const float* b,
                  int64_t ldb, float* c, int64_t ldc, Causal causal) {
  tiles::run<Tile12x32>(m, n, k, alpha, a, b, ldb, c, ldc, causal);
}

// ---- BatchNorm ----

// generic::bn_row_sums's eight partial sums in one register: lane j of su is lane j of su0
// (j < 4) or of su1 (j ≥ 4) there, so every addition is the generic one.
HPC_AVX512 void row_sums(const float* a, const float* b, float shift, int64_t n, double* sum_u,
                         double* sum_uv) {
  using generic::Double8;
  Double8 su = {}, suv = {};
  const double ds = double(shift);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {  // as two steps of eight, widened together (generic::widen16)
    Double8 u0, u1, v0, v1;
    generic::widen16(a + k, u0, u1);
    generic::widen16(b + k, v0, v1);
    su += u0;
    suv += u0 * (v0 - ds);
    su += u1;
    suv += u1 * (v1 - ds);
  }
  for (; k + 8 <= n; k += 8) {
    Double8 u, v;
    generic::widen8(a + k, u);
    generic::widen8(b + k, v);
    su += u;
    suv += u * (v - ds);
  }
  double tail_u = 0, tail_uv = 0;
  for (; k < n; ++k) {
    tail_u += double(a[k]);
    tail_uv += double(a[k]) * (double(b[k]) - ds);
  }
  const double u0 = su[0] + su[4], u1 = su[1] + su[5], u2 = su[2] + su[6], u3 = su[3] + su[7];
  const double v0 = suv[0] + suv[4], v1 = suv[1] + suv[5], v2 = suv[2] + suv[6], v3 = suv[3] + suv[7];
  *sum_u += (u0 + u1) + (u2 + u3) + tail_u;
  *sum_uv += (v0 + v1) + (v2 + v3) + tail_uv;
}

// generic.h's loops, compiled for AVX-512.
HPC_AVX512 void normalize_row(const float* x, float* y, int64_t n, float mu, float gain, float shift,
                              bool relu) {
  generic::bn_normalize_row(x, y, n, mu, gain, shift, relu);
}
HPC_AVX512 void mask_row(const float* x, const float* dy, float* out, int64_t n, float mu, float gain,
                         float shift) {
  generic::bn_mask_row(x, dy, out, n, mu, gain, shift);
}
HPC_AVX512 void dx_row(const float* x, const float* dy, float* dx, int64_t n, float k1, float k2, float k3,
                       float mu) {
  generic::bn_dx_row(x, dy, dx, n, k1, k2, k3, mu);
}
HPC_AVX512 void blocked_sums(const BlockedShape& s, const float* a, const float* b, const float* shift,
                             double* sum_u, double* sum_uv, const ReluMask<float>* relu) {
  generic::bn_blocked_sums(s, a, b, shift, sum_u, sum_uv, relu);
}
HPC_AVX512 void blocked_affine(const BlockedShape& s, const float* a, const float* b, float* out,
                               const float* k1, const float* k2, const float* k3, const float* mu,
                               const ReluMask<float>* relu) {
  generic::bn_blocked_affine(s, a, b, out, k1, k2, k3, mu, relu);
}
HPC_AVX512 void blocked_normalize(const BlockedShape& s, const float* x, float* out, const float* mu,
                                  const float* gain, const float* shift, bool relu) {
  generic::bn_blocked_normalize(s, x, out, mu, gain, shift, relu);
}

// ---- Adam and the bias: generic.h's loops, compiled for AVX-512 ----
HPC_AVX512 void adam(float* p, float* m, float* v, const float* g, int64_t n,
                     const kernels::AdamCoeffs<float>& c) {
  generic::adam(p, m, v, g, n, c);
}
HPC_AVX512 void bias_add_rows(float* y, const float* b, int64_t rows, int64_t channels, int64_t spatial) {
  generic::bias_add_rows(y, b, rows, channels, spatial);
}
HPC_AVX512 void bias_sums(const float* g, double* acc, int64_t rows, int64_t channels, int64_t spatial) {
  generic::bias_sums(g, acc, rows, channels, spatial);
}

// ---- SwiGLU: avx2.cpp's bodies in sixteen lanes, the tail through masked loads (zeros in the
// unused lanes, as load_partial pads). RMSNorm keeps avx2's rows: a row of a few hundred floats
// is bound by its loads, not its lanes. ----

HPC_AVX512 inline __m512 sigmoid16(__m512 g) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}

HPC_AVX512 void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + j);
    _mm512_mask_storeu_ps(out + j, m,
                          _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(g)), _mm512_maskz_loadu_ps(m, up + j)));
  }
}

HPC_AVX512 void swiglu_backward_row(const float* gate, const float* up, const float* dout, float* dgate,
                                    float* dup, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + j), u = _mm512_maskz_loadu_ps(m, up + j),
                 d = _mm512_maskz_loadu_ps(m, dout + j), s = sigmoid16(g);
    const __m512 slope = _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
    _mm512_mask_storeu_ps(dgate + j, m, _mm512_mul_ps(_mm512_mul_ps(d, u), slope));
    _mm512_mask_storeu_ps(dup + j, m, _mm512_mul_ps(d, _mm512_mul_ps(g, s)));
  }
}

}  // namespace

const KernelTable<float>* avx512_table() {
  static const KernelTable<float> t = [] {
    KernelTable<float> k = *avx2_table();
    k.isa = "avx512";
    k.gelu_forward = gelu_forward;
    k.gelu_backward = gelu_backward;
    k.tile_product = tile_product;
    k.bn_row_sums = row_sums;
    k.bn_normalize_row = normalize_row;
    k.bn_mask_row = mask_row;
    k.bn_dx_row = dx_row;
    k.bn_blocked_sums = blocked_sums;
    k.bn_blocked_affine = blocked_affine;
    k.bn_blocked_normalize = blocked_normalize;
    k.adam = adam;
    k.bias_add_rows = bias_add_rows;
    k.bias_sums = bias_sums;
    k.swiglu_row = swiglu_row;
    k.swiglu_backward_row = swiglu_backward_row;
    return k;
  }();
  return &t;
}

}  // namespace hpc::backend::cpu

#else

namespace hpc::backend::cpu {
const KernelTable<float>* avx512_table() { return nullptr; }
}  // namespace hpc::backend::cpu

#endif
