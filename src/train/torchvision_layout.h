// torchvision's ResNet names for an hpctrain ResNet (export --format torch
// writes torchvision.safetensors beside model.safetensors for such models).
//
// An hpctrain ResNet in torchvision's layout — the resnet50 preset, or any
// spec of the same shape: `conv bn relu maxpool`, then `res(...) relu`
// blocks of bottleneck (conv bn relu conv bn relu conv bn) or basic (conv
// bn relu conv bn) bodies, `gap linear` — holds the tensors of
// torchvision.models.resnet* under other names:
//
//   0.conv.weight                 conv1.weight
//   1.bn.{gamma,beta,running_*}   bn1.{weight,bias,running_*}
//   I.res.body.J.weight           layerS.B.convK.weight   (J-th child, K-th conv of the body)
//   I.res.body.J.{gamma,…}        layerS.B.bnK.{weight,…}
//   I.res.shortcut.0.weight       layerS.B.downsample.0.weight
//   I.res.shortcut.1.{gamma,…}    layerS.B.downsample.1.{weight,…}
//   L.linear.{weight,bias}        fc.{weight,bias}
//
// Stage S (1–4) starts at the first block and at every later block with a
// projection shortcut; B counts blocks within the stage. Weights need no
// transposition (conv [out, in, k, k] and linear [out, in] are PyTorch's).
#pragma once

#include <map>
#include <string>

#include "nn/model.h"

namespace hpc::train {

// hpctrain name → torchvision name for every parameter and bn buffer
// (running_mean, running_var) of `model`; empty when the model is not a
// ResNet in torchvision's layout. (torchvision's num_batches_tracked has no
// counterpart: the exporter writes 0.)
std::map<std::string, std::string> torchvision_resnet_names(const nn::Model& model);

}  // namespace hpc::train
