// Which activations of a chain of layers are channel-blocked (core/tensor.h).
//
// oneDNN's convolutions compute in a blocked layout (nChw16c with AVX-512);
// handing them plain NCHW tensors costs two reorders per convolution and
// direction, a quarter of oneDNN's time in resnet20. So the layers between
// two convolutions that can work on blocked tensors (bn, relu and the other
// activations, res, gap at the end) keep the convolutions' layout, and only
// the chain's ends and layers that need NCHW (pooling, flatten, linear, a
// conv with a bias) see plain tensors.
//
// The choice, from each layer's Layer::output_block: first, backwards, which
// layers could take a blocked input given what follows them ("may"), then,
// forwards from the plain input, the layout of every activation: a layer's
// output is blocked only where the next layer may take it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/layer.h"

namespace hpc::nn {

// The blocks of a chain's activations when its input comes in `in` and its
// output may be blocked (out_may): [0] = in, [i + 1] = layer i's output.
// Empty when the chain cannot take `in`. block = 0: all plain.
std::vector<int64_t> chain_blocks(const std::vector<std::unique_ptr<Layer>>& layers, int64_t in,
                                  int64_t block, bool out_may);
// chain_blocks, also telling every layer its layout (Layer::use_layout). Never empty.
std::vector<int64_t> use_chain_layout(const std::vector<std::unique_ptr<Layer>>& layers, int64_t in,
                                      int64_t block, bool out_may);

}  // namespace hpc::nn
