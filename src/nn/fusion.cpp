#include "nn/fusion.h"

namespace hpc::nn {

std::vector<bool> fold_relus(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<bool> folded(layers.size(), false);
  for (const auto& layer : layers) layer->fold_inner();
  for (size_t i = 1; i + 1 < layers.size(); ++i)
    if (layers[i]->is_relu() && !folded[i - 1] && layers[i - 1]->take_relu()) folded[i] = true;
  return folded;
}

}  // namespace hpc::nn
