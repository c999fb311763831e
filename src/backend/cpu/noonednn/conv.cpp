// A build without oneDNN: every convolution runs on the lowering to GEMM (nn/layers/conv_lowering.h).
#include "backend/cpu/onednn.h"
#include "core/error.h"

namespace hpc::backend::cpu::onednn {

bool enabled() { return false; }
std::string describe() {
  return "not built (no libdnnl-dev when hpctrain was compiled): convolutions lowered to GEMM";
}
int64_t channel_block() { return 0; }
std::string implementations(const Tensor&, const Tensor&, const kernels::ConvShape&, const Tensor&) {
  return "lowering (no oneDNN in this build)";
}
bool takes(const Tensor&, const Tensor&, const Tensor&) { return false; }
void convolve(const Tensor&, const Tensor&, const kernels::ConvShape&, const Tensor&) {
  throw Error(EXIT_INTERNAL, "oneDNN convolution called in a build without oneDNN");
}
void convolve_backward(const Tensor&, const Tensor&, const Tensor&, const kernels::ConvShape&, const Tensor&,
                       const Tensor&) {
  throw Error(EXIT_INTERNAL, "oneDNN convolution called in a build without oneDNN");
}
bool matmul_wins(int64_t, int64_t, int64_t) { return false; }
void matmul(bool, bool, int64_t, int64_t, int64_t, float, const float*, const float*, float, float*) {
  throw Error(EXIT_INTERNAL, "oneDNN matmul called in a build without oneDNN");
}
void set_threads(int) {}

}  // namespace hpc::backend::cpu::onednn
