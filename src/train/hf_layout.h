// The Hugging Face GPT-2 layout of an hpctrain GPT (export --format hf and
// --model.init from such a directory).
//
// An hpctrain GPT is `embed block × L ln lm_head`; GPT2LMHeadModel names the
// same tensors transformer.wte / wpe, transformer.h.i.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f, and ties
// lm_head to wte as hpctrain does (so the head is not stored). GPT-2's
// projections are Conv1D modules whose weight is [in, out], the transpose of
// hpctrain's (and torch.nn.Linear's) [out, in]; LayerNorm weight/bias are
// hpctrain's gamma/beta. GELU is the tanh form ("gelu_new") in both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/model.h"

namespace hpc::train {

struct HfName {
  std::string name;        // "transformer.h.0.attn.c_attn.weight"
  bool transpose = false;  // a Conv1D weight: [in, out] there, [out, in] in hpctrain
};

// The GPT-2 shape of `model`'s spec, or a UserError naming the first layer that has no counterpart.
struct GptShape {
  int64_t layers = 0, heads = 0, width = 0, context = 0, vocab = 0;
};
GptShape gpt_shape_of(const nn::Model& model, const std::string& what);

// The Hugging Face name of hpctrain parameter `name` of a model with that shape (nullopt: none).
std::optional<HfName> hf_name_of(const std::string& name);

}  // namespace hpc::train
