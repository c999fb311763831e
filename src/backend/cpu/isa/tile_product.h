// Matrix products for the attention's per-(sample, head) matrices (T×T scores
// and probabilities, T×d heads): the types of the tile_product kernel
// (kernel_table.h) and the driver its register-tiled bodies share.
//
// Why not OpenBLAS in float32: at these shapes (T = 128, d = 64 in gpt-small)
// each call packs both operands and clears C before a short kernel, and the
// half of the work above the diagonal is done and thrown away: 12% of a
// gpt-small step for 8% of its FLOPs (~95 GFLOP/s against ~190 for the
// model's large products). Here every tile reads its operands where they lie
// (strided rows of the packed qkv, or the transposed probabilities), and a row
// block skips the columns or the terms the causal pattern makes zero, which
// halves the work at long T.
//
// Every C(i, j) is one FMA chain over k in increasing order, then times alpha,
// in every table (generic, 6×16 AVX2 tiles, 12×32 AVX-512 tiles): the same
// bits whichever runs. The terms a causal pattern leaves out are exact zeros,
// which an FMA chain would add without changing a bit (for finite operands).
// Float64 (gradient checks), and float32 in a build without FMA, call OpenBLAS
// on the whole matrices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hpc::backend::cpu {

// A(i, k) = data[i·row_stride + k·col_stride]: a row-major matrix, or with
// the strides swapped the transpose of one, read in place.
template <typename T>
struct StridedA {
  const T* data;
  int64_t row_stride, col_stride;
};

// The zeros of a causal (lower-triangular) square operand that a product may skip.
enum class Causal {
  None,
  LowerOut,  // only C(i, j) with j ≤ i is wanted; C(i, j > i) is left unspecified
  LowerA,    // A(i, k) = 0 for k > i
  UpperA,    // A(i, k) = 0 for k < i
};

// The part of a row block [i0, i0 + rows) that the causal pattern needs: the
// columns [0, n_end) and, for every row of the block, the terms [k_begin, k_end).
struct BlockRange {
  int64_t n_end, k_begin, k_end;
};

inline BlockRange block_range(Causal causal, int64_t i0, int64_t rows, int64_t n, int64_t k, int64_t nr) {
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

// A register tile's operands: A from row i0, B from column j0, C at (i0, j0); terms [kb, ke).
struct Tile {
  const float* a;
  int64_t rs, cs;
  const float* b;
  int64_t ldb, kb, ke;
  float alpha;
  float* c;
  int64_t ldc;
};

// The driver over row blocks and column tiles for a kernel K with K::MR × K::NR
// register tiles (`K::tile<R>(const Tile&)` for R = MR, 4 and 1 rows).
namespace tiles {

// Rows [i0, i0 + R) of C: whole NR-column tiles in place, and a last narrower
// tile through zero-padded B and C buffers (its extra lanes are discarded).
template <class K, int R>
void row_block(int64_t i0, int64_t n, int64_t k, float alpha, const StridedA<float>& a, const float* b,
               int64_t ldb, float* c, int64_t ldc, Causal causal) {
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
void run(int64_t m, int64_t n, int64_t k, float alpha, const StridedA<float>& a, const float* b, int64_t ldb,
         float* c, int64_t ldc, Causal causal) {
  int64_t i = 0;
  for (; i + K::MR <= m; i += K::MR) row_block<K, K::MR>(i, n, k, alpha, a, b, ldb, c, ldc, causal);
  for (; i + 4 <= m; i += 4) row_block<K, 4>(i, n, k, alpha, a, b, ldb, c, ldc, causal);
  for (; i < m; ++i) row_block<K, 1>(i, n, k, alpha, a, b, ldb, c, ldc, causal);
}

}  // namespace tiles

}  // namespace hpc::backend::cpu
