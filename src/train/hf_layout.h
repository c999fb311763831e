// The Hugging Face layouts of hpctrain's language models: GPT2LMHeadModel
// for `embed block… ln lm_head` and LlamaForCausalLM for `embed(…,positions=0)
// llama_block… rmsnorm lm_head` — parameter names, config.json both ways, and
// the shape of a model in between (export --format hf, --model.init DIR).
//
// GPT-2: transformer.wte / wpe, transformer.h.i.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f, lm_head tied
// to wte (not stored). Its projections are Conv1D modules whose weight is
// [in, out], the transpose of hpctrain's (and torch.nn.Linear's) [out, in];
// LayerNorm weight/bias are hpctrain's gamma/beta; GELU is the tanh form
// ("gelu_new").
//
// Llama: model.embed_tokens, model.layers.i.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj},
// model.norm, lm_head (absent when tied). Linear weights are [out, in] as
// hpctrain's, and the rotary pairing is rotate-half in both, so nothing is
// transposed or permuted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/llama_math.h"
#include "nn/model.h"

namespace hpc::train {

// What config.json says of a language model, and what the spec gives back.
struct LmShape {
  enum class Family { Gpt2, Llama } family = Family::Gpt2;
  int64_t layers = 0, heads = 0, kv_heads = 0, width = 0, ffn = 0, context = 0, vocab = 0;
  int64_t positions = 0;  // GPT-2: rows of the position table (n_positions); Llama: max_position_embeddings
  double eps = 1e-5, theta = 10000;
  kernels::RopeScaling scaling;
  bool tied = true;
  std::optional<int64_t> bos, eos;  // token ids (config.json's bos_token_id, eos_token_id)
  std::string torch_dtype = "float32";
};

struct HfName {
  std::string name;        // "transformer.h.0.attn.c_attn.weight"
  bool transpose = false;  // a Conv1D weight: [in, out] there, [out, in] in hpctrain
};

// The shape of `model`'s spec, or a UserError starting with `what` that names
// the first layer without a Hugging Face counterpart.
LmShape lm_shape_of(const nn::Model& model, const std::string& what);

// The Hugging Face name of hpctrain parameter `name` in a model of that family (nullopt: none).
std::optional<HfName> hf_name_of(const std::string& name, LmShape::Family family);

// config.json's text for `shape` (model_type gpt2 or llama), with its token ids and dtype.
std::string hf_config_json(const LmShape& shape);

// The shape config.json's text describes; UserError starting with `what` for
// a model type, activation, attention layout or rope scaling hpctrain does not
// have (named). context: the training window (0: max_position_embeddings, at
// most 2048).
LmShape lm_shape_from_config(const std::string& json_text, int64_t context, const std::string& what);

// The hpctrain spec of a shape (the presets' form).
std::string spec_of(const LmShape& shape);

// "float32", "bfloat16", "float16" for a DType, and back (F32 for anything else).
const char* torch_dtype_name(DType dtype);
DType dtype_of_torch(const std::string& name);

}  // namespace hpc::train
