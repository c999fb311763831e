// The choice of the float32 kernel table (see kernel_table.h).
#include "backend/cpu/isa/kernel_table.h"

#include <atomic>

#include "backend/cpu/blas_core.h"
#include "backend/cpu/switches.h"

namespace hpc::backend::cpu {

namespace {

bool cpu_runs_avx512() {
  const CpuIsa isa = cpu_isa();
  return isa.avx512f && isa.avx512bw && isa.avx512vl && !switched(Switch::Isa);
}

// The best table this build has and this CPU runs, decided once.
const KernelTable<float>* chosen() {
  static const KernelTable<float>* const table = [] {
    if (const KernelTable<float>* t = avx512_table(); t && cpu_runs_avx512()) return t;
    if (const KernelTable<float>* t = avx2_table()) return t;  // the baseline has AVX2: every CPU runs it
    return &generic_f32_table();
  }();
  return table;
}

std::atomic<const KernelTable<float>*> used_by_tests{nullptr};

}  // namespace

template <>
const KernelTable<float>& kernel_table<float>() {
  const KernelTable<float>* t = used_by_tests.load(std::memory_order_relaxed);
  return t ? *t : *chosen();
}

template <>
const KernelTable<double>& kernel_table<double>() {
  return generic_f64_table();
}

std::vector<const KernelTable<float>*> runnable_tables() {
  std::vector<const KernelTable<float>*> out{&generic_f32_table()};
  if (const KernelTable<float>* t = avx2_table()) out.push_back(t);
  if (const KernelTable<float>* t = avx512_table(); t && cpu_runs_avx512()) out.push_back(t);
  return out;
}

UseKernels::UseKernels(const KernelTable<float>& table) : before_(used_by_tests.exchange(&table)) {}

UseKernels::~UseKernels() { used_by_tests.store(before_); }

}  // namespace hpc::backend::cpu
