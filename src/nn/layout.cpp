// nn/layout.h: the layout of a chain's activations.
#include "nn/layout.h"

#include "core/error.h"

namespace hpc::nn {

namespace {

// may[i]: whether layer i can take a blocked input, given may[i + 1] for its output; may[n] = out_may.
std::vector<bool> may_take_blocked(const std::vector<std::unique_ptr<Layer>>& layers, int64_t block,
                                   bool out_may) {
  std::vector<bool> may(layers.size() + 1, false);
  may.back() = out_may && block > 0;
  for (size_t i = layers.size(); i-- > 0;)
    may[i] = block > 0 && layers[i]->output_block(block, block, may[i + 1]) >= 0;
  return may;
}

}  // namespace

std::vector<int64_t> chain_blocks(const std::vector<std::unique_ptr<Layer>>& layers, int64_t in,
                                  int64_t block, bool out_may) {
  const std::vector<bool> may = may_take_blocked(layers, block, out_may);
  std::vector<int64_t> blocks{in};
  for (size_t i = 0; i < layers.size(); ++i) {
    const int64_t out = layers[i]->output_block(blocks.back(), block, may[i + 1]);
    if (out < 0) return {};
    HPC_ASSERT(out == 0 || may[i + 1], "layout: a layer gave a blocked output nobody may take");
    blocks.push_back(out);
  }
  return blocks;
}

std::vector<int64_t> use_chain_layout(const std::vector<std::unique_ptr<Layer>>& layers, int64_t in,
                                      int64_t block, bool out_may) {
  std::vector<int64_t> blocks = chain_blocks(layers, in, block, out_may);
  HPC_ASSERT(!blocks.empty(), "layout: the chain cannot take its input's layout");
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->use_layout(blocks[i], block);
  return blocks;
}

}  // namespace hpc::nn
