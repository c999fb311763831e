// Element-wise activation layers: relu, gelu (the tanh approximation of
// GPT-2, see kernels/activation_math.h) and tanh.
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

ActivationLayer::ActivationLayer(kernels::ActivationKind act, const LayerArgs& args) : act_(act) {
  ArgReader(args, {}).finish();
}

std::string ActivationLayer::spec() const {
  switch (act_) {
    case kernels::ActivationKind::Relu:
      return "relu";
    case kernels::ActivationKind::Gelu:
      return "gelu";
    case kernels::ActivationKind::Tanh:
      return "tanh";
  }
  return "?";
}

void ActivationLayer::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  backend::activation_forward(act_, x, y);
}

void ActivationLayer::backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                               const RunCtx&) {
  if (dx.defined()) backend::activation_backward(act_, x, y, dy, dx);
}

}  // namespace hpc::nn
