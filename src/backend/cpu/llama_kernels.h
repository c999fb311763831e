// Float32 bodies of the Llama pieces' CPU ops (llama_ops.cpp): RMSNorm rows
// and the SwiGLU gate, one set of functions per instruction set.
//
// Why a table: the build targets x86-64-v3, and AVX-512 pays where a loop is
// bound by its arithmetic (SwiGLU's exp per element, like GELU); the table
// of one instruction set is picked once, at first use, from CPUID
// (simd::avx512(), so HPCTRAIN_CPU_ISA=avx2 keeps AVX2). The `generic`
// bodies are plain loops over the same partial sums and the same fused
// multiply-adds (explicit std::fma) as the vector bodies, so every table
// gives the same bits: the generic loops are the reference the vector ones
// are tested against bit for bit (test_llama's CpuKernels tests). SwiGLU's
// exp is vec_math.h's exp8 in every body (exp_scalar is its lane, written
// out), within ~1 ulp of std::exp, so the float32 op differs from
// kernels/llama_math.h's std::exp by an ulp or so (as GELU does).
//
// Sums have a fixed shape, so results do not depend on which body runs:
//   Σx² (RMSNorm forward): double, sixteen partial sums (element
//     j into partial j mod 16), then ((p0+p4)+(p8+p12)) … a fixed tree;
//   Σ g·x̂ (RMSNorm backward): float, 32 partial sums (j mod 32), a fixed tree.
#pragma once

#include <cstdint>

namespace hpc::backend::cpu::llama {

struct Kernels {
  const char* name;
  // y[j] = w[j]·(x[j]·rs) with rs = 1/√(Σx²/n + eps) (returned).
  float (*rmsnorm_row)(const float* x, const float* w, int64_t n, double eps, float* y);
  // dx[j] (= or +=) rs·(g[j] − x̂[j]·Σ(g·x̂)/n) with g = w·dy, x̂ = x·rs (dx null: not wanted);
  // dw[j] += dy[j]·x̂[j].
  void (*rmsnorm_backward_row)(const float* x, const float* dy, const float* w, float rs, int64_t n,
                               float* dx, bool accumulate, float* dw);
  // out[j] = silu(gate[j])·up[j] over n elements.
  void (*swiglu_fwd)(const float* gate, const float* up, float* out, int64_t n);
  // dgate[j], dup[j] from dout[j].
  void (*swiglu_bwd)(const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                     int64_t n);
};

const Kernels& generic_kernels();
// The table for this CPU (AVX-512, AVX2, or generic where the build has neither).
const Kernels& kernels();
// Every table this build and CPU can run, generic first (the tests compare them).
const Kernels* const* all_kernels(int* count);

// vec_math.h's exp8 for one float, operation for operation (the bodies' shared exp).
float exp_scalar(float x);

}  // namespace hpc::backend::cpu::llama
