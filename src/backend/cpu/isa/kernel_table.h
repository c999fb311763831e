// The CPU backend's hot loops, one table of kernels per instruction set, chosen once.
//
// The build targets ARCH_FLAGS (x86-64-v3: AVX2 + FMA by default) so that one
// binary runs on every node of a cluster, yet a few float32 loops pay for
// hand-written AVX2 or AVX-512 bodies. Each op (../*_ops.cpp) calls
// `kernel_table<T>().kernel(...)` and never asks which instruction set runs:
//
//   generic  isa/generic.h: plain C++ loops, one element at a time in a fixed
//            order of operations. The reference: every other table gives
//            bitwise its results (tests/unit/test_cpu_isa.cpp), so every node
//            computes the same bits whichever table it runs. Float64 (the
//            gradient checks) always runs generic.
//   avx2     isa/avx2.cpp: 8-lane bodies where they pay; generic elsewhere.
//            Built when the baseline has AVX2 + FMA.
//   avx512   isa/avx512.cpp: 16-lane bodies, and generic loops compiled for
//            AVX-512 (a function target attribute); avx2 elsewhere. Run when
//            the CPU has AVX-512F/BW/VL and HPCTRAIN_CPU_ISA is not avx2.
//
// The float32 table is chosen once, at first use, from CPUID and the switch
// (the versions line names it). Tables exist only for ISAs whose bodies
// compute what generic does: in a build without FMA in its baseline
// (ARCH_FLAGS=-march=x86-64-v2, the container) generic is the only one,
// since an FMA body beside FMA-less plain loops would round differently.
// Where to add a kernel: docs/architecture.md, "Where to add a CPU kernel".
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/isa/tile_product.h"
#include "kernels/optim_math.h"

namespace hpc::backend::cpu {

// A fused relu's constants per channel (BatchNorm, ops.def): the mean, the gain
// gamma·invstd and beta, so that a mask is taken from the very value forward wrote.
template <typename T>
struct ReluMask {
  const T* mu;
  const T* gain;
  const T* shift;
};

// A channel-blocked float32 activation (core/tensor.h): [samples, blocks, spatial, block], block 8 or 16.
struct BlockedShape {
  int64_t samples, blocks, spatial;
  int block;
};

template <typename T>
struct KernelTable {
  const char* isa;  // "generic", "avx2", "avx512"

  // ---- activations (nn_ops.cpp): kernels/activation_math.h's GELU ----
  void (*gelu_forward)(const T* x, T* y, int64_t n);
  void (*gelu_backward)(const T* x, const T* dy, T* dx, int64_t n);

  // ---- attention (transformer_ops.cpp) ----
  // Row t of `rows` rows of t_len scores (rows t_len apart) becomes softmax(p[t, 0..t + offset])
  // (max-subtracted), zeros after: a window's t_len×t_len scores with offset 0; decoding's rows
  // after `offset` cached positions.
  void (*causal_softmax)(T* p, int64_t rows, int64_t t_len, int64_t offset);
  // C = alpha·(A·B), tile_gemm.h's contract.
  void (*tile_product)(int64_t m, int64_t n, int64_t k, T alpha, StridedA<T> a, const T* b, int64_t ldb, T* c,
                       int64_t ldc, Causal causal);
  // out[j·rows + i] = x[i·ld + j] for i < rows, j < cols.
  void (*transpose)(const T* x, int64_t rows, int64_t cols, int64_t ld, T* out);

  // ---- loss (loss_ops.cpp) ----
  // One row of softmax cross-entropy: the loss; with dz, its gradient × grad_scale (kernels/loss_math.h).
  double (*xent_row)(const T* z, int64_t k, int32_t label, double smoothing, double grad_scale, T* dz);

  // ---- BatchNorm (norm_ops.cpp), plain rows ----
  // *sum_u += Σ a, *sum_uv += Σ a·(b − shift), in double.
  void (*bn_row_sums)(const T* a, const T* b, T shift, int64_t n, double* sum_u, double* sum_uv);
  // y = (x − mu)·gain + shift, or max(y, 0) with relu.
  void (*bn_normalize_row)(const T* x, T* y, int64_t n, T mu, T gain, T shift, bool relu);
  // out = dy where (x − mu)·gain + shift > 0, else 0: a fused relu's backward.
  void (*bn_mask_row)(const T* x, const T* dy, T* out, int64_t n, T mu, T gain, T shift);
  // dx = k1·dy + k2·(x − mu) + k3.
  void (*bn_dx_row)(const T* x, const T* dy, T* dx, int64_t n, T k1, T k2, T k3, T mu);

  // ---- BatchNorm, channel-blocked float32 (every table, the float64 one too: no other dtype is blocked)
  // ---- Per channel c: sum_u[c] += Σ a, sum_uv[c] += Σ a·(b − shift[c]); with relu, a is dy masked by it (b
  // = x).
  void (*bn_blocked_sums)(const BlockedShape& s, const float* a, const float* b, const float* shift,
                          double* sum_u, double* sum_uv, const ReluMask<float>* relu);
  // out = k1·a + k2·(b − mu) + k3 per channel; with relu, a masked as above.
  void (*bn_blocked_affine)(const BlockedShape& s, const float* a, const float* b, float* out,
                            const float* k1, const float* k2, const float* k3, const float* mu,
                            const ReluMask<float>* relu);
  // out = (x − mu)·gain + shift per channel, or max(·, 0) with relu.
  void (*bn_blocked_normalize)(const BlockedShape& s, const float* x, float* out, const float* mu,
                               const float* gain, const float* shift, bool relu);

  // ---- optimizer (optim_ops.cpp): kernels::adam_update over a range ----
  void (*adam)(T* p, T* m, T* v, const T* g, int64_t n, const kernels::AdamCoeffs<T>& c);

  // ---- bias (core_ops.cpp), y or dy as [rows, channels, spatial] ----
  void (*bias_add_rows)(T* y, const T* b, int64_t rows, int64_t channels, int64_t spatial);
  // acc[c] += channel c's values, in double (rows in order; a run's partial sums fixed).
  void (*bias_sums)(const T* g, double* acc, int64_t rows, int64_t channels, int64_t spatial);

  // ---- RMSNorm and SwiGLU (llama_ops.cpp) ----
  // y = w·(x·rs) with rs = 1/√(Σx²/n + eps), returned; Σx² in double, sixteen partial sums.
  T (*rms_row)(const T* x, const T* w, int64_t n, double eps, T* y);
  // dx (= or +=, null: not wanted) = rs·(g − x̂·Σ(g·x̂)/n), g = w·dy, x̂ = x·rs (Σ in 32
  // partial sums); dw += dy·x̂.
  void (*rms_backward_row)(const T* x, const T* dy, const T* w, T rs, int64_t n, T* dx, bool accumulate,
                           T* dw);
  // out = silu(gate)·up, and its gradients from dout (kernels/llama_math.h; float32 with exp_ref).
  void (*swiglu_row)(const T* gate, const T* up, T* out, int64_t n);
  void (*swiglu_backward_row)(const T* gate, const T* up, const T* dout, T* dgate, T* dup, int64_t n);
};

// The table the ops call: float32's chosen one, or float64's generic one.
template <typename T>
const KernelTable<T>& kernel_table();
template <>
const KernelTable<float>& kernel_table<float>();
template <>
const KernelTable<double>& kernel_table<double>();

// Tests: the float32 tables this build has and this CPU may run, generic first
// (HPCTRAIN_CPU_ISA=avx2 leaves avx512 out, as it does for training).
std::vector<const KernelTable<float>*> runnable_tables();

// Tests: runs the ops on `table` instead of the chosen one while it lives.
class UseKernels {
 public:
  explicit UseKernels(const KernelTable<float>& table);
  ~UseKernels();
  UseKernels(const UseKernels&) = delete;
  UseKernels& operator=(const UseKernels&) = delete;

 private:
  const KernelTable<float>* before_;
};

// The tables, for the selection (kernel_table.cpp) and the tests: generic's always, avx2's and
// avx512's when the build has them (nullptr otherwise; avx512's whether or not the CPU can run it).
const KernelTable<float>& generic_f32_table();
const KernelTable<double>& generic_f64_table();
const KernelTable<float>* avx2_table();
const KernelTable<float>* avx512_table();

}  // namespace hpc::backend::cpu
