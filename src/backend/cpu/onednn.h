// oneDNN on the CPU: convolutions (forward, backward-data, backward-weights),
// and the float32 matrix products where its matmul beats OpenBLAS.
//
// The CPU backend's conv2d_* ops (cpu/conv_ops.cpp) call these. A build with
// oneDNN (the Makefile finds libdnnl-dev) links onednn/conv.cpp; without it
// noonednn/conv.cpp says "not available" and every convolution runs on the
// lowering to column matrices + GEMM (nn/layers/conv_lowering.h), the
// reference the tests compare oneDNN with.
//
// Why oneDNN: its convolutions use the CPU's widest vector unit (picked at
// run time from CPUID, like OpenBLAS's cores) in blocked layouts, where the
// lowering pays a column-matrix gather and a GEMM on thin matrices for the small
// feature maps of CIFAR-sized networks.
#pragma once

#include <string>

#include "core/tensor.h"
#include "kernels/conv_math.h"

namespace hpc::backend::cpu::onednn {

// Whether this build has oneDNN, and whether it is switched on for this
// process (HPCTRAIN_CPU_CONV=lowering switches it off: comparisons, benchmarks).
bool enabled();
// "oneDNN 2.6.3 (ISA: AVX-512 …)" or why not ("not built: …", "off: …").
std::string describe();

// The channel block oneDNN's convolutions want activations in: 16 with
// AVX-512, 8 with AVX2, 0 (plain) on older CPUs, when oneDNN is off, and
// with HPCTRAIN_CPU_LAYOUT=nchw (comparisons, benchmarks).
int64_t channel_block();

// oneDNN's kernel for each pass of this convolution ("forward jit_wino_4x3:avx512_core, data …,
// weights jit:avx512_core"): which algorithm runs where (tests, benchmarks).
std::string implementations(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g,
                            const Tensor& y);

// Whether oneDNN takes these tensors: float32 CPU tensors (float64 gradient
// checks run on the lowering, which oneDNN's float32 is compared against).
bool takes(const Tensor& x, const Tensor& weight, const Tensor& y);
// y = x ⋆ weight (no bias), x [n, C, H, W], weight [OC, C, k, k], y [n, OC, Ho, Wo];
// x, y, dy and dx each plain or channel-blocked (dy like y, dx like x).
void convolve(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g, const Tensor& y);
// dweight += ∂/∂weight; dx = ∂/∂x unless dx is undefined.
void convolve_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const kernels::ConvShape& g,
                       const Tensor& dweight, const Tensor& dx);

// Whether a float32 C[m×n] = alpha·op(A)·op(B) + beta·C runs faster in
// oneDNN's matmul than in OpenBLAS (measured by bench_cpu; HPCTRAIN_CPU_GEMM=
// openblas keeps every product in OpenBLAS), and that product, row-major with
// the leading dimensions of contiguous operands (as cblas_sgemm with lda = k
// or m, ldb = n or k, ldc = n).
bool matmul_wins(int64_t m, int64_t n, int64_t k);
void matmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
            float beta, float* c);

// Threads for oneDNN's OpenMP runtime (the rank's BLAS thread count).
void set_threads(int threads);

}  // namespace hpc::backend::cpu::onednn
