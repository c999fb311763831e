// Float32 matrix products for the attention's per-(sample, head) matrices
// (T×T scores and probabilities, T×d heads), register-tiled in AVX-512 or
// AVX2 and aware of the causal mask's zeros.
//
// Why not OpenBLAS: at these shapes (T = 128, d = 64 in gpt-small) each call
// packs both operands and clears C before a short kernel, and the half of the
// work above the diagonal is done and thrown away: 12% of a gpt-small step
// for 8% of its FLOPs (~95 GFLOP/s against ~190 for the model's large
// products). Here every tile reads its operands where they lie (strided rows
// of the packed qkv, or the transposed probabilities), and a row block skips
// the columns or the terms the causal pattern makes zero, which halves the
// work at long T.
//
// Every C(i, j) is one FMA chain over k in increasing order, then times
// alpha, in every body (AVX-512, AVX2): the results are the same bits
// whichever runs (test_cpu_simd checks it). The terms a causal pattern
// leaves out are exact zeros, which an FMA chain would add without changing
// a bit (for finite operands). Builds without AVX2 + FMA call OpenBLAS.
#pragma once

#include <cstdint>

namespace hpc::backend::cpu {

// A(i, k) = data[i·row_stride + k·col_stride]: a row-major matrix, or with
// the strides swapped the transpose of one, read in place.
struct StridedA {
  const float* data;
  int64_t row_stride, col_stride;
};

// The zeros of a causal (lower-triangular) square operand that a product may skip.
enum class Causal {
  None,
  LowerOut,  // only C(i, j) with j ≤ i is wanted; C(i, j > i) is left unspecified
  LowerA,    // A(i, k) = 0 for k > i
  UpperA,    // A(i, k) = 0 for k < i
};

// C = alpha·(A·B) for an m×k A, a row-major k×n B (leading dimension ldb) and
// a row-major m×n C (leading dimension ldc), written without reading C.
void tile_gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, StridedA a, const float* b, int64_t ldb,
                   float* c, int64_t ldc, Causal causal);

// out[j·rows + i] = x[i·ld + j] for i < rows, j < cols: B operands that are
// the transpose of a strided head (Kᵀ, Vᵀ), in 8×8 register blocks.
void transpose_f32(const float* x, int64_t rows, int64_t cols, int64_t ld, float* out);

}  // namespace hpc::backend::cpu
