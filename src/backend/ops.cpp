// The dispatch of every op in ops.def, by macro expansion: an op goes to
// backend/cuda when any of its device operands is a CUDA tensor (to the
// stubs of backend/nocuda in a CPU-only build, which never has one), and to
// backend/cpu otherwise. The dtype is the implementations' business.
#include "backend/ops.h"

#include "backend/cpu/onednn.h"
#include "backend/cpu/switches.h"
#include "backend/ops_impl.h"

namespace hpc::backend {

namespace {

template <typename... Tensors>
bool any_on_gpu(const Tensors&... t) {
  return ((t.device() != Device::CPU) || ...);
}

}  // namespace

// `return f();` with a void f is allowed, so one definition fits every return type.
#define HPC_OP(ret, name, params, args, device)    \
  ret name params {                                \
    if (any_on_gpu device) return cuda::name args; \
    return cpu::name args;                         \
  }
#include "backend/ops.def"
#undef HPC_OP

int64_t channel_block(Device device, DType dtype) {
  return device == Device::CPU && dtype == DType::F32 ? cpu::onednn::channel_block() : 0;
}

bool fuses_relu(Device device) { return device == Device::CPU && !cpu::switched(cpu::Switch::Fuse); }

}  // namespace hpc::backend
