// Core backend ops: BLAS-level math and whole-buffer elementwise work.
//
// Every op takes tensors and dispatches on their device and dtype (see
// dispatch.h). Counts are element counts. Unless noted, outputs are written,
// not accumulated; gemm accumulates when beta = 1, which is how layers add
// into the flat gradient buffer across gradient-accumulation micro-steps.
#pragma once

#include "core/tensor.h"

namespace hpc::backend {

// C[m×n] = alpha · op(A) · op(B) + beta · C, row-major; op(X) = Xᵀ when trans_x.
// A is m×k (k×m when trans_a), B is k×n (n×k when trans_b).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
          const Tensor& b, double beta, const Tensor& c);

void fill(const Tensor& t, double value);
// dst = src (same count and dtype; host↔device copies are explicit here).
void copy(const Tensor& src, const Tensor& dst);
// dst (on the GPU) = src (host memory, ideally pinned), queued on the copy
// stream so that it overlaps the GPU's compute; later ops wait for it. The
// caller returns at once and must leave src unchanged until the next op that
// returns a value to the host. With both tensors on the CPU: copy().
void copy_async(const Tensor& src, const Tensor& dst);
// Converts between float dtypes (and from U8/I32 to float) element by element
// (on the GPU also to and from bfloat16 and float16; both tensors on one device).
void convert(const Tensor& src, const Tensor& dst);
// y += alpha · x
void axpy(double alpha, const Tensor& x, const Tensor& y);
// x *= alpha
void scale(const Tensor& x, double alpha);
// Σ x² in double precision (for global gradient norms).
double sum_squares(const Tensor& x);
// Σ x in double precision.
double sum(const Tensor& x);

// y[n, j] += bias[j] for an [N, J] (or [N, J, spatial] when spatial > 1) tensor.
void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial);
// dbias[j] += Σ_n,s dy[n, j, s]
void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial);

}  // namespace hpc::backend
