// The CPU-only build's stand-ins for the CUDA ops (Caffe's "CPU_ONLY
// stubs"), one per entry of backend/ops.def: the dispatch calls them for
// CUDA tensors, which a build without CUDA can never create (device_alloc
// refuses), so reaching one is an internal error.
#include <string>

#include "backend/ops_impl.h"
#include "core/error.h"

namespace hpc::backend::cuda {

namespace {
// Called with the op's arguments, so that the stub uses every parameter.
struct Unavailable {
  const char* op;
  template <typename... Args>
  [[noreturn]] void operator()(const Args&...) const {
    throw Error(EXIT_INTERNAL, std::string(op) + ": a CUDA tensor in a build without CUDA");
  }
};
}  // namespace

// args is the parenthesised argument list itself: it cannot take more parentheses.
#define HPC_OP(ret, name, params, args, device) \
  ret name params { Unavailable{#name} args; }  // NOLINT(bugprone-macro-parentheses)
#include "backend/ops.def"
#undef HPC_OP

}  // namespace hpc::backend::cuda
