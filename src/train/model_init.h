// --model.init PATH [--model.init_skip NAME,…]: start training from weights
// a user already has (fine-tuning). Loads parameters and BatchNorm buffers —
// not the optimizer, the step or the sampler — from
//   - an hpctrain checkpoint (ckpt-STEP.h5; its spec names the tensors),
//   - a safetensors file under hpctrain's names (`export --format torch`),
//   - a safetensors file or a directory holding model.safetensors in the
//     Hugging Face GPT-2 layout (`export --format hf`, GPT2LMHeadModel's
//     save_pretrained), mapped and transposed by train/hf_layout.h.
// Names in init_skip (a tensor, or a prefix ending at a dot: "11.linear"
// covers 11.linear.weight and .bias) keep their fresh initialisation, e.g. a
// new head for another number of classes. A tensor of the model missing from
// the file, a shape mismatch (both shapes named) or a skip name that matches
// nothing is a UserError (exit 2). Tensors of the file that the model does
// not have are ignored (a replaced head's old weights).
#pragma once

#include <string>

#include "nn/model.h"

namespace hpc::train {

// Returns a one-line summary for the start-up report.
std::string init_model(nn::Model& model, const std::string& path, const std::string& skip);

}  // namespace hpc::train
