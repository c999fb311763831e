// The avx2 table (kernel_table.h): 8-lane bodies for GELU, the attention's softmax, products
// and transposes, the cross-entropy rows, RMSNorm's row sums and SwiGLU; generic.h's loops (compiled for the
// AVX2 baseline) for the rest. Each body does generic.h's operations lane by lane, in its order. Built only
// where the baseline has AVX2 and FMA (ARCH_FLAGS x86-64-v3, the default).
#include "backend/cpu/isa/generic.h"

#if defined(__AVX2__) && defined(__FMA__)

#include "backend/cpu/isa/avx2_math.h"

namespace hpc::backend::cpu {

namespace {

using avx2::exp8;

// ---- GELU: generic::gelu_value and gelu_grad_value in eight lanes ----

void gelu_forward(const float* x, float* y, int64_t n) {
  const __m256 k = _mm256_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm256_set1_ps(float(kernels::GELU_CUBIC));
  const __m256 one = _mm256_set1_ps(1.0f), minus_two = _mm256_set1_ps(-2.0f);
  avx2::map8(x, y, n, [&](__m256 v) {
    const __m256 u = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(c, v), v), v, v));
    return _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_mul_ps(minus_two, u))));
  });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  const __m256 k2 = _mm256_set1_ps(float(-2 * kernels::GELU_SQRT_2_OVER_PI));
  const __m256 k = _mm256_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm256_set1_ps(float(kernels::GELU_CUBIC));
  const __m256 c3 = _mm256_set1_ps(float(3 * kernels::GELU_CUBIC));
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  avx2::map8(x, dy, dx, n, [&](__m256 v, __m256 g) {
    const __m256 v2 = _mm256_mul_ps(v, v);
    const __m256 s = _mm256_div_ps(
        one, _mm256_add_ps(one, exp8(_mm256_mul_ps(k2, _mm256_fmadd_ps(_mm256_mul_ps(c, v2), v, v)))));
    const __m256 du = _mm256_mul_ps(k, _mm256_fmadd_ps(c3, v2, one));
    const __m256 slope =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(two, v), s), _mm256_mul_ps(_mm256_sub_ps(one, s), du));
    return _mm256_mul_ps(g, _mm256_add_ps(s, slope));
  });
}

// ---- the causal softmax: generic::softmax_row in eight lanes ----

// The row's maximum: eight lanes run `mx = std::max(mx, row[s])` side by side
// (MAXPS(v, m) is std::max(m, v): m unless v > m), then the lanes and the rest in order.
float row_max(const float* row, int64_t n) {
  float mx = row[0];
  __m256 m = _mm256_set1_ps(mx);
  int64_t s = 0;
  for (; s + 8 <= n; s += 8) m = _mm256_max_ps(_mm256_loadu_ps(row + s), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  for (const float l : lanes) mx = std::max(mx, l);
  for (; s < n; ++s) mx = std::max(mx, row[s]);
  return mx;
}

void softmax_row(float* row, int64_t n) {
  const __m256 shift = _mm256_set1_ps(row_max(row, n));
  __m256 acc = _mm256_setzero_ps();
  int64_t s = 0;
  for (; s + 8 <= n; s += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + s), shift));
    _mm256_storeu_ps(row + s, e);
    acc = _mm256_add_ps(acc, e);
  }
  float total = avx2::sum8(acc);
  if (s < n) {
    avx2::store_partial(row + s, exp8(_mm256_sub_ps(avx2::load_partial(row + s, n - s), shift)), n - s);
    for (; s < n; ++s) total += row[s];
  }
  const float inv = 1.0f / total;
  for (int64_t i = 0; i < n; ++i) row[i] *= inv;
}

void causal_softmax(float* p, int64_t rows, int64_t t_len, int64_t offset) {
  for (int64_t t = 0; t < rows; ++t) {
    float* row = p + t * t_len;
    softmax_row(row, t + offset + 1);
    std::fill_n(row + t + offset + 1, t_len - t - offset - 1, 0.0f);
  }
}

// ---- the attention's products: 6 rows × 16 columns, 12 ymm accumulators of the 16 registers ----
struct Tile6x16 {
  static constexpr int MR = 6, NR = 16;
  template <int R>
  static void tile(const Tile& t) {
    __m256 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t kk = t.kb; kk < t.ke; ++kk) {
      const float* bk = t.b + kk * t.ldb;
      const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
      const float* ak = t.a + kk * t.cs;
      for (int i = 0; i < R; ++i) {
        const __m256 ai = _mm256_broadcast_ss(ak + i * t.rs);
        acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
    const __m256 alpha = _mm256_set1_ps(t.alpha);
    for (int i = 0; i < R; ++i) {
      _mm256_storeu_ps(t.c + i * t.ldc, _mm256_mul_ps(alpha, acc[i][0]));
      _mm256_storeu_ps(t.c + i * t.ldc + 8, _mm256_mul_ps(alpha, acc[i][1]));
    }
  }
};

void tile_product(int64_t m, int64_t n, int64_t k, float alpha, StridedA<float> a, const float* b,
                  int64_t ldb, float* c, int64_t ldc, Causal causal) {
  tiles::run<Tile6x16>(m, n, k, alpha, a, b, ldb, c, ldc, causal);
}

// The 8×8 block at x (rows ld apart) transposed into out (rows ldo apart).
void transpose8x8(const float* x, int64_t ld, float* out, int64_t ldo) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ldo, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

void transpose(const float* x, int64_t rows, int64_t cols, int64_t ld, float* out) {
  int64_t i = 0;
  for (; i + 8 <= rows; i += 8)
    for (int64_t j = 0; j + 8 <= cols; j += 8) transpose8x8(x + i * ld + j, ld, out + j * rows + i, rows);
  for (int64_t r = 0; r < i; ++r)  // the columns right of the last whole block
    for (int64_t j = cols / 8 * 8; j < cols; ++j) out[j * rows + r] = x[r * ld + j];
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = x[i * ld + j];
}

// ---- cross-entropy: generic::xent_row in eight lanes ----
double xent_row(const float* z, int64_t k, int32_t label, double smoothing, double grad_scale, float* dz) {
  float m = z[0];
  for (int64_t j = 1; j < k; ++j) m = z[j] > m ? z[j] : m;
  const __m256 shift = _mm256_set1_ps(m);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // the exps' eight partial sums
  double logits = 0;
  for (int64_t j = 0; j < k; j += 8) {
    const int64_t n = std::min<int64_t>(8, k - j);
    const __m256 x = n == 8 ? _mm256_loadu_ps(z + j) : avx2::load_partial(z + j, n);
    __m256 e = exp8(_mm256_sub_ps(x, shift));
    if (n < 8) {  // the padded lanes add nothing
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane)));
    }
    if (dz != nullptr) n == 8 ? _mm256_storeu_ps(dz + j, e) : avx2::store_partial(dz + j, e, n);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    for (int64_t i = 0; i < n; ++i) logits += double(z[j + i]);
  }
  alignas(32) double part[8];
  _mm256_store_pd(part, lo);
  _mm256_store_pd(part + 4, hi);
  double exps = 0;
  for (const double p : part) exps += p;
  return generic::xent_from_exps(z, k, label, smoothing, grad_scale, dz, m, exps, logits);
}

// ---- RMSNorm rows: generic::rms_row / rms_backward_row's partial sums in registers ----

float rms_row(const float* x, const float* w, int64_t n, double eps, float* y) {
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

void rms_backward_row(const float* x, const float* dy, const float* w, float rs, int64_t n, float* dx,
                      bool accumulate, float* dw) {
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
  const float dot =
      avx2::sum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail;
  const float mean_gx = dot / float(n);
  const __m256 m = _mm256_set1_ps(mean_gx);
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 d = _mm256_loadu_ps(dy + j), xh = _mm256_mul_ps(_mm256_loadu_ps(x + j), r);
    _mm256_storeu_ps(dw + j, _mm256_fmadd_ps(d, xh, _mm256_loadu_ps(dw + j)));
    if (dx == nullptr) continue;
    const __m256 v = _mm256_mul_ps(r, _mm256_fnmadd_ps(xh, m, _mm256_mul_ps(_mm256_loadu_ps(w + j), d)));
    _mm256_storeu_ps(dx + j, accumulate ? _mm256_add_ps(_mm256_loadu_ps(dx + j), v) : v);
  }
  for (; j < n; ++j) {
    const float xh = x[j] * rs;
    dw[j] = std::fma(dy[j], xh, dw[j]);
    if (dx == nullptr) continue;
    const float v = rs * std::fma(-xh, mean_gx, w[j] * dy[j]);
    dx[j] = accumulate ? dx[j] + v : v;
  }
}

// ---- SwiGLU: generic::swiglu_row / swiglu_backward_row in eight lanes ----

__m256 sigmoid8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}

void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  avx2::map8(gate, up, out, n,
             [](__m256 g, __m256 u) { return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), u); });
}

void swiglu_grad8(__m256 g, __m256 u, __m256 d, __m256& dg, __m256& du) {
  const __m256 one = _mm256_set1_ps(1.0f), s = sigmoid8(g);
  dg = _mm256_mul_ps(_mm256_mul_ps(d, u), _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one)));
  du = _mm256_mul_ps(d, _mm256_mul_ps(g, s));
}

void swiglu_backward_row(const float* gate, const float* up, const float* dout, float* dgate, float* dup,
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
  swiglu_grad8(avx2::load_partial(gate + j, r), avx2::load_partial(up + j, r),
               avx2::load_partial(dout + j, r), dg, du);
  avx2::store_partial(dgate + j, dg, r);
  avx2::store_partial(dup + j, du, r);
}

}  // namespace

const KernelTable<float>* avx2_table() {
  static const KernelTable<float> t = [] {
    KernelTable<float> k = generic_f32_table();
    k.isa = "avx2";
    k.gelu_forward = gelu_forward;
    k.gelu_backward = gelu_backward;
    k.causal_softmax = causal_softmax;
    k.tile_product = tile_product;
    k.transpose = transpose;
    k.xent_row = xent_row;
    k.rms_row = rms_row;
    k.rms_backward_row = rms_backward_row;
    k.swiglu_row = swiglu_row;
    k.swiglu_backward_row = swiglu_backward_row;
    return k;
  }();
  return &t;
}

}  // namespace hpc::backend::cpu

#else

namespace hpc::backend::cpu {
const KernelTable<float>* avx2_table() { return nullptr; }
}  // namespace hpc::backend::cpu

#endif
