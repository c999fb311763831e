// tile_gemm_f32 (see tile_gemm.h): one driver over row blocks and column
// tiles, and an MR×NR register tile per instruction set.
#include "backend/cpu/tile_gemm.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/simd.h"
#include "core/error.h"

#if defined(__AVX2__) && defined(__FMA__) && HPC_SIMD_AVX512
#include <immintrin.h>
#define HPC_TILE_VECTOR 1
#else
#include <cblas.h>
#define HPC_TILE_VECTOR 0
#endif

namespace hpc::backend::cpu {

#if HPC_TILE_VECTOR
namespace {

// The part of a row block [i0, i0 + rows) that the causal pattern needs: the
// columns [0, n_end) and, for every row of the block, the terms [k_begin, k_end).
struct BlockRange {
  int64_t n_end, k_begin, k_end;
};

BlockRange block_range(Causal causal, int64_t i0, int64_t rows, int64_t n, int64_t k, int64_t nr) {
  const int64_t i1 = i0 + rows;
  switch (causal) {
    case Causal::LowerOut:  // whole tiles up to the block's last diagonal element
      return {std::min(n, (i1 + nr - 1) / nr * nr), 0, k};
    case Causal::LowerA:
      return {n, 0, std::min(k, i1)};
    case Causal::UpperA:
      return {n, std::min(k, i0), k};
    case Causal::None:
      break;
  }
  return {n, 0, k};
}

// A tile's operands: A from row i0, B from column j0, C at (i0, j0); terms [kb, ke).
struct Tile {
  const float* a;
  int64_t rs, cs;
  const float* b;
  int64_t ldb, kb, ke;
  float alpha;
  float* c;
  int64_t ldc;
};

// 12 rows × 32 columns: 24 zmm accumulators, two for B, one for A's broadcast.
struct Avx512 {
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

// 6 rows × 16 columns: 12 ymm accumulators of the 16 registers.
struct Avx2 {
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

// Rows [i0, i0 + R) of C: whole NR-column tiles in place, and a last narrower
// tile through zero-padded B and C buffers (its extra lanes are discarded).
template <class K, int R>
void row_block(int64_t i0, int64_t n, int64_t k, float alpha, const StridedA& a, const float* b, int64_t ldb,
               float* c, int64_t ldc, Causal causal) {
  const BlockRange r = block_range(causal, i0, R, n, k, K::NR);
  const float* a0 = a.data + i0 * a.row_stride;
  Tile t{a0, a.row_stride, a.col_stride, b, ldb, r.k_begin, r.k_end, alpha, c + i0 * ldc, ldc};
  int64_t j = 0;
  for (; j + K::NR <= r.n_end; j += K::NR) {
    t.b = b + j;
    t.c = c + i0 * ldc + j;
    K::template tile<R>(t);
  }
  if (j == r.n_end) return;
  const int64_t width = r.n_end - j;
  thread_local std::vector<float> b_pad;
  b_pad.assign(size_t(k * K::NR), 0.0f);
  for (int64_t kk = r.k_begin; kk < r.k_end; ++kk)
    std::copy_n(b + kk * ldb + j, width, b_pad.begin() + kk * K::NR);
  float c_pad[R * K::NR];
  t.b = b_pad.data();
  t.ldb = K::NR;
  t.c = c_pad;
  t.ldc = K::NR;
  K::template tile<R>(t);
  for (int i = 0; i < R; ++i) std::copy_n(c_pad + i * K::NR, width, c + (i0 + i) * ldc + j);
}

template <class K>
void run(int64_t m, int64_t n, int64_t k, float alpha, const StridedA& a, const float* b, int64_t ldb,
         float* c, int64_t ldc, Causal causal) {
  int64_t i = 0;
  for (; i + K::MR <= m; i += K::MR) row_block<K, K::MR>(i, n, k, alpha, a, b, ldb, c, ldc, causal);
  for (; i + 4 <= m; i += 4) row_block<K, 4>(i, n, k, alpha, a, b, ldb, c, ldc, causal);
  for (; i < m; ++i) row_block<K, 1>(i, n, k, alpha, a, b, ldb, c, ldc, causal);
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

}  // namespace
#endif

void transpose_f32(const float* x, int64_t rows, int64_t cols, int64_t ld, float* out) {
  int64_t i = 0;
#if HPC_TILE_VECTOR
  for (; i + 8 <= rows; i += 8)
    for (int64_t j = 0; j + 8 <= cols; j += 8) transpose8x8(x + i * ld + j, ld, out + j * rows + i, rows);
  for (int64_t r = 0; r < i; ++r)  // the columns right of the last whole block
    for (int64_t j = cols / 8 * 8; j < cols; ++j) out[j * rows + r] = x[r * ld + j];
#endif
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = x[i * ld + j];
}

void tile_gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, StridedA a, const float* b, int64_t ldb,
                   float* c, int64_t ldc, Causal causal) {
#if HPC_TILE_VECTOR
  if (simd::avx512())
    run<Avx512>(m, n, k, alpha, a, b, ldb, c, ldc, causal);
  else
    run<Avx2>(m, n, k, alpha, a, b, ldb, c, ldc, causal);
#else
  // The causal zeros are in A (or the unwanted part of C): the whole product is right too.
  (void)causal;
  // A single row (or column) of A has both strides 1; BLAS still wants a leading dimension that
  // covers the row (k, or m for Aᵀ), though it never steps by it.
  const bool a_by_rows = a.col_stride == 1 && (m == 1 || a.row_stride >= k);
  const bool a_by_cols = !a_by_rows && a.row_stride == 1 && (k == 1 || a.col_stride >= m);
  HPC_ASSERT(a_by_rows || a_by_cols, "tile_gemm_f32: A must be row-major or transposed");
  const int64_t lda = a_by_rows ? (m == 1 ? std::max<int64_t>(k, 1) : a.row_stride)
                                : (k == 1 ? std::max<int64_t>(m, 1) : a.col_stride);
  cblas_sgemm(CblasRowMajor, a_by_rows ? CblasNoTrans : CblasTrans, CblasNoTrans, int(m), int(n), int(k),
              alpha, a.data, int(lda), b, int(ldb), 0.0f, c, int(ldc));
#endif
}

}  // namespace hpc::backend::cpu
