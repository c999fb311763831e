// simd::avx512() (see simd.h).
#include "backend/cpu/simd.h"

#include <atomic>

#include "backend/cpu/blas_core.h"
#include "backend/cpu/switches.h"

namespace hpc::backend::cpu::simd {

namespace {

bool cpu_allows() {
#if HPC_SIMD_AVX512
  static const bool yes = [] {
    const CpuIsa isa = cpu_isa();
    return isa.avx512f && isa.avx512bw && isa.avx512vl && !switched(Switch::Isa);
  }();
  return yes;
#else
  return false;
#endif
}

std::atomic<bool> forced_default{false};

}  // namespace

bool avx512() { return cpu_allows() && !forced_default.load(std::memory_order_relaxed); }

void force_default(bool on) { forced_default.store(on, std::memory_order_relaxed); }

}  // namespace hpc::backend::cpu::simd
