// --model.init PATH [--model.init_skip NAME,…]: start from weights a user
// already has (fine-tuning, or eval / predict / sample / export of them).
// Loads parameters and BatchNorm buffers — not the optimizer, the step or
// the sampler — from
//   - an hpctrain checkpoint (ckpt-STEP.h5; its spec names the tensors),
//   - a safetensors file under hpctrain's names (`export --format torch`),
//   - a Hugging Face directory (config.json + model.safetensors, or shards
//     with model.safetensors.index.json) or safetensors file in the GPT-2 or
//     Llama layout (GPT2LMHeadModel's / LlamaForCausalLM's names, F32, BF16
//     or F16), mapped by train/hf_layout.h.
// Names in init_skip (a tensor, or a prefix ending at a dot: "11.linear"
// covers 11.linear.weight and .bias) keep their fresh initialisation, e.g. a
// new head for another number of classes. A tensor of the model missing from
// the file, a shape mismatch (both shapes named), a config.json that
// describes another model than the one built (rope_theta, eps, a tied head:
// what tensor shapes cannot show), or a skip name that matches nothing is a
// UserError (exit 2). Tensors of the file that the model does not have are
// ignored (a replaced head's old weights).
#pragma once

#include <string>

#include "config/config.h"
#include "nn/model.h"

namespace hpc::train {

// Returns a one-line summary for the start-up report. `model_what` names the
// model in shape errors ("this model", "config.json's model").
std::string init_model(nn::Model& model, const std::string& path, const std::string& skip,
                       const std::string& model_what = "this model");

// The spec of the language model a Hugging Face directory's config.json
// describes, at `context` tokens (0: its max_position_embeddings, at most
// 2048); "" when `path` is no directory with a config.json.
std::string hf_init_spec(const std::string& path, int64_t context);

}  // namespace hpc::train
