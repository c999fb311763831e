// Vectorised float32 exp for the CPU backend's hot elementwise loops (GELU,
// the attention softmax).
//
// Why not std::exp: glibc's expf is a scalar call per element (GCC only uses
// the vector libmvec variants under -ffast-math), and in a GPT training step
// GELU forward + backward alone cost ~11% of the time that way. exp8 is the
// classic Cephes range reduction (x = n·ln2 + r, |r| ≤ ln2/2, ln2 split in two
// for an exact n·ln2) with a degree-6 polynomial for eʳ and 2ⁿ built in the
// exponent bits: ≤ 1.03 ulp from the correctly rounded result over the whole
// clamped range (checked over every float in the range by
// tests/unit/test_cpu_vec_math.cpp), NaN in → NaN out, and a pure function of its
// input, so results stay bitwise reproducible.
//
// Inputs are clamped to [-87.3, 88.3] (2ⁿ stays a normal float): below, the
// result is ~1e-38 instead of 0, above it is 2.2e38 instead of +inf; GELU and
// softmax only ever divide by 1 + exp or normalise by a total ≥ 1, where the
// difference is below a float's resolution.
//
// Only built with AVX2 + FMA (the default -march=x86-64-v3); without them
// HPC_CPU_VEC_EXP is 0 and the callers keep their std::exp loops. exp16 is
// exp8 in AVX-512 (simd.h), the same operations lane by lane: the same bits.
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HPC_CPU_VEC_EXP 1
#else
#define HPC_CPU_VEC_EXP 0
#endif

namespace hpc::backend::cpu {

#if HPC_CPU_VEC_EXP

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

#if HPC_SIMD_AVX512
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
#endif

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

// The eight lanes' total, always in the same order.
inline float sum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

#endif  // HPC_CPU_VEC_EXP

}  // namespace hpc::backend::cpu
