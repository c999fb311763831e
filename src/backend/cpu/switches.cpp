#include "backend/cpu/switches.h"

#include <cstdlib>
#include <cstring>

namespace hpc::backend::cpu {

namespace {

constexpr SwitchSpec SWITCHES[] = {
    {Switch::Conv, "HPCTRAIN_CPU_CONV", "lowering", "convolutions lowered to GEMM, not oneDNN"},
    {Switch::ConvAlgo, "HPCTRAIN_CPU_CONV_ALGO", "direct",
     "every oneDNN convolution pass in its own direct kernel (no Winograd, no mirrored forward)"},
    {Switch::Layout, "HPCTRAIN_CPU_LAYOUT", "nchw", "every activation in plain NCHW"},
    {Switch::Fuse, "HPCTRAIN_CPU_FUSE", "none", "every relu as its own pass"},
    {Switch::Gemm, "HPCTRAIN_CPU_GEMM", "openblas", "every float32 GEMM in OpenBLAS"},
    {Switch::Isa, "HPCTRAIN_CPU_ISA", "avx2", "the avx2 kernel table, not the avx512 one"},
};

}  // namespace

std::span<const SwitchSpec> switches() { return SWITCHES; }

bool switched(Switch which) {
  for (const SwitchSpec& s : SWITCHES)
    if (s.which == which) {
      const char* v = std::getenv(s.variable);
      return v != nullptr && std::strcmp(v, s.value) == 0;
    }
  return false;
}

}  // namespace hpc::backend::cpu
