// Which OpenBLAS core (kernel set) this process runs, and whether it fits the CPU.
//
// A DYNAMIC_ARCH OpenBLAS picks its kernels from CPUID when it is loaded. On
// a VM that masks the CPU model, or a CPU newer than the distribution's
// OpenBLAS, it falls back to an old core (Prescott: SSE3 kernels) and runs
// sgemm at a fifth of the machine, silently. So, first thing in main(),
// before MPI starts: compare the core OpenBLAS chose with the CPU's vector
// instruction sets; where it is lesser, re-execute this program once with
// OPENBLAS_CORETYPE set to the best core for the CPU (the library reads the
// variable only when it is loaded, hence the exec). The new process checks
// that the library now runs that core and that a small sgemm agrees with a
// double-precision reference; if not, it re-executes back to the library's
// own choice, so a core that computes wrong results is never used. An
// OPENBLAS_CORETYPE the user set is respected (reported, never changed).
//
// Test hooks (core/fault.h): `lesser@blas_core` makes OPENBLAS_CORETYPE stand
// for the library's own choice (so OPENBLAS_CORETYPE=Prescott simulates a
// misdetection on any x86 machine); `wrong@blas_check` makes the self-check
// of a corrected core see a wrong result.
#pragma once

#include <string>

namespace hpc::backend::cpu {

// Vector-ISA classes, in order: the widest instructions a core's kernels (or a CPU) use.
enum class SpeedClass { Unknown, Sse, Avx, Avx2, Avx512 };
const char* speed_class_name(SpeedClass c);  // "SSE", "AVX", "AVX2", "AVX-512", "unknown"

// What CPUID (and the OS, through XGETBV) allows.
struct CpuIsa {
  bool avx = false, avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false;
  SpeedClass best() const;
  std::string text() const;  // "AVX2 FMA AVX-512F/BW/VL"
};
CpuIsa cpu_isa();

// The class of an OpenBLAS core name as openblas_get_corename() spells it
// (case-insensitive): "Prescott" → Sse, "Haswell"/"Zen" → Avx2, "SkylakeX" → Avx512.
SpeedClass core_class(const std::string& core);
// The core to ask for on a CPU of class `c` ("" where none is better than SSE).
const char* best_core_for(SpeedClass c);

// The result of a self-check: max |C - C_ref| / max Σ|a||b|, and whether it is within float rounding.
struct SelfCheck {
  bool ok = false;
  double error = 0;
};
// Three small sgemm calls (all transpose combinations hpctrain uses, odd
// sizes for the kernels' edge code) against a float64 reference. `corrupt`
// perturbs one result element (the test hook), which the check must catch.
SelfCheck sgemm_self_check(bool corrupt = false);

// What the start-up check decided.
struct BlasCore {
  std::string core;  // in use (openblas_get_corename)
  SpeedClass core_speed = SpeedClass::Unknown;
  SpeedClass cpu_speed = SpeedClass::Unknown;
  std::string cpu;         // CpuIsa::text()
  std::string why;         // how the core was chosen: one clause
  bool corrected = false;  // hpctrain replaced the library's choice
  SelfCheck check;
  std::string line() const;  // "SkylakeX (AVX-512 kernels; CPU: …): …; sgemm self-check ok (…)"
};

// The pure decision of the first process: the core to re-execute with, or ""
// to keep what runs. `user_set`: OPENBLAS_CORETYPE came from the user.
std::string core_to_request(const std::string& running, bool user_set, bool dynamic_arch, const CpuIsa& cpu);

// Called first thing in main(), before MPI_Init and before any thread: may
// replace the process (execv of /proc/self/exe with the same arguments);
// returns otherwise. Idempotent; blas_core() calls it when main did not.
void fit_blas_core(char** argv);
const BlasCore& blas_core();

}  // namespace hpc::backend::cpu
