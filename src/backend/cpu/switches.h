// The CPU backend's comparison switches (docs/configuration.md): environment
// variables whose one value turns a default off, for A/B measurements and for
// the tests that hold the two paths against each other. The backend reads
// them at first use, before any configuration exists; config/ refuses a
// misspelt name or a value other than the one (UserError, exit 2).
#pragma once

#include <span>

namespace hpc::backend::cpu {

enum class Switch { Conv, ConvAlgo, Layout, Fuse, Gemm, Isa };

struct SwitchSpec {
  Switch which;
  const char* variable;  // HPCTRAIN_CPU_…
  const char* value;     // the one value
  const char* effect;    // what it does, for messages
};

std::span<const SwitchSpec> switches();

// Whether the switch's variable is set to its value. Unset (or empty) is the default.
bool switched(Switch which);

}  // namespace hpc::backend::cpu
