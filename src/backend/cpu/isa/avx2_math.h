// 8-lane float32 helpers of the AVX2 kernels (isa/avx2.cpp): exp8, generic::exp_ref in eight
// lanes (the same operations, so the same bits; its reasons are there), partial loads and
// stores for loop tails, and the horizontal add of a register. Included only where the
// baseline has AVX2 and FMA (isa/avx2.cpp; tests/unit/test_cpu_vec_math.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace hpc::backend::cpu::avx2 {

inline __m256 exp8(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  // n = round(x·log2 e) by the 1.5·2²³ shifter (round to nearest even, no conversion needed).
  const __m256 shifter = _mm256_set1_ps(12582912.0f);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), shifter), shifter);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));  // 1 + r + p·r²
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
}

// Loads / stores the first n < 8 floats of p, zero-padded: the tail of a loop
// goes through the same vector code, so every element is computed the same way.
inline __m256 load_partial(const float* p, int64_t n) {
  alignas(32) float buf[8] = {};
  for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
  return _mm256_load_ps(buf);
}
inline void store_partial(float* p, __m256 v, int64_t n) {
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}

// out[i] = f(a[i]) (and f(a[i], b[i])) over n floats, 8 at a time; out may alias the inputs.
template <typename F>
void map8(const float* a, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i)));
  if (i < n) store_partial(out + i, f(load_partial(a + i, n - i)), n - i);
}
template <typename F>
void map8(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) store_partial(out + i, f(load_partial(a + i, n - i), load_partial(b + i, n - i)), n - i);
}

// The eight lanes' total as ((0+4)+(2+6)) + ((1+5)+(3+7)), always in that order.
inline float sum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

}  // namespace hpc::backend::cpu::avx2
