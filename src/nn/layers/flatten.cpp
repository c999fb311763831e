// flatten: [C,H,W] → [C·H·W]. The memory layout does not change, so both
// directions are plain copies (the model gives every layer its own output).
#include "backend/ops.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

Flatten::Flatten(const LayerArgs& args) { ArgReader(args, {}).finish(); }

void Flatten::forward(const Tensor& x, const Tensor& y, const RunCtx&) { backend::copy(x, y); }

void Flatten::backward(const Tensor&, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  if (dx.defined()) backend::copy(dy, dx);
}

}  // namespace hpc::nn
