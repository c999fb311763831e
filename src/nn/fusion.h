// Folding each relu into the layer before it (Layer::take_relu): the
// activation is applied in the same pass that writes the layer's output
// (BatchNorm's normalise, a residual block's add), and its backward is the
// mask that layer's backward applies on the way (BatchNorm recomputes it from
// its input; a residual block from its output). That saves a full pass over
// the activation each way and the relu's output and gradient buffers; the
// results are the unfused ones bit for bit.
//
// A chain (the model, a res block's body or shortcut) folds a relu when the
// layer before it takes it, and never its last layer, so that the dy a
// folding layer may overwrite is always the chain's own buffer.
#pragma once

#include <memory>
#include <vector>

#include "nn/layer.h"

namespace hpc::nn {

// Folds the relus of a chain (and, through Layer::fold_inner, of the chains
// inside its layers): [i] is true where layer i is a relu the layer before took.
std::vector<bool> fold_relus(const std::vector<std::unique_ptr<Layer>>& layers);

}  // namespace hpc::nn
