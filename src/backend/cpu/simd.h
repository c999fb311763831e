// Run-time dispatch of the CPU backend's hot per-element loops to AVX-512.
//
// The build targets ARCH_FLAGS (x86-64-v3: AVX2 + FMA by default), so that
// one binary runs on every node of a cluster. Loops that pay for wider
// vectors get a second body compiled for AVX-512 (HPC_AVX512, a function
// target attribute) and are called through `if (simd::avx512())`, decided
// once from CPUID. Both bodies are the same source, written so that they
// compute the same operations in the same order (element-wise rules; sums
// with a fixed set of partial sums), so results are bitwise the same on every
// node whichever body runs: test_cpu_simd compares them bit for bit.
// HPCTRAIN_CPU_ISA=avx2 keeps the default bodies (comparisons).
#pragma once

// Only where the default bodies have FMA too (ARCH_FLAGS x86-64-v3 or later):
// the compiler contracts a·b + c into one FMA in both bodies alike then,
// while an AVX-512 body beside an FMA-less default (x86-64-v2) would round
// differently. Elsewhere the default bodies run everywhere.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__FMA__)
#define HPC_SIMD_AVX512 1
#define HPC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#else
#define HPC_SIMD_AVX512 0
#define HPC_AVX512
#endif

namespace hpc::backend::cpu::simd {

// Whether the AVX-512 bodies run: the CPU has AVX-512F/BW/VL, HPCTRAIN_CPU_ISA
// does not say avx2, and force_default() has not switched them off.
bool avx512();
// Tests: run the default bodies (true) or the CPU's best again (false).
void force_default(bool on);

}  // namespace hpc::backend::cpu::simd
