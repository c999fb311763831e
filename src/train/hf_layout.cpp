// The Hugging Face layouts (see hf_layout.h).
#include "train/hf_layout.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/spec.h"

namespace hpc::train {

namespace {

using nlohmann::json;
using Family = LmShape::Family;

double named(const nn::LayerArgs& a, const char* key, double fallback) {
  const auto it = a.named.find(key);
  return it == a.named.end() ? fallback : it->second;
}

}  // namespace

const char* torch_dtype_name(DType dtype) {
  return dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
}

DType dtype_of_torch(const std::string& name) {
  return name == "bfloat16" ? DType::BF16 : name == "float16" ? DType::F16 : DType::F32;
}

LmShape lm_shape_of(const nn::Model& model, const std::string& what) {
  const std::vector<nn::LayerArgs> layers = nn::parse_spec(model.spec());
  LmShape g;
  auto refuse = [&](size_t i, const std::string& why) {
    i = std::min(i, layers.size() - 1);
    std::string text = layers[i].text;
    text.erase(text.find_last_not_of(" \t\n") + 1);
    throw UserError(what + ": layer " + std::to_string(i) + " '" + text +
                    "' has no Hugging Face counterpart (" + why +
                    "; the hf layout is for embed block… ln lm_head (GPT-2) and embed llama_block… rmsnorm "
                    "lm_head (Llama) models, use --format torch)");
  };
  if (layers.empty() || layers[0].name != "embed") refuse(0, "a language model starts with the embedding");
  const nn::LayerArgs& embed = layers[0];
  g.vocab = int64_t(embed.positional.at(0));
  g.width = int64_t(embed.positional.at(1));
  g.context = int64_t(embed.positional.at(2));
  g.positions = int64_t(named(embed, "positions", double(g.context)));
  size_t i = 1;
  const bool llama = layers.size() > 1 && layers[1].name == "llama_block";
  g.family = llama ? Family::Llama : Family::Gpt2;
  const char* block = llama ? "llama_block" : "block";
  for (; i < layers.size() && layers[i].name == block; ++i, ++g.layers)
    if (layers[i].text != layers[1].text) refuse(i, "every block of a Hugging Face model has the same shape");
  if (g.layers == 0) refuse(i, "no transformer block after the embedding");
  if (llama != (g.positions == 0))
    refuse(0, llama ? "a Llama has no position table (positions=0)" : "GPT-2 learns its positions");
  const nn::LayerArgs& b = layers[1];
  g.heads = int64_t(b.positional.at(0));
  g.kv_heads = int64_t(named(b, "kv_heads", double(g.heads)));
  if (!llama && g.kv_heads != g.heads) refuse(1, "GPT-2 has no grouped kv heads");
  for (const nn::ParamInfo& p : model.param_info())
    if (p.name == "1." + std::string(block) + (llama ? ".mlp.gate.weight" : ".mlp.fc.weight"))
      g.ffn = p.full_shape[0];  // the unsplit model's (dist.tp splits it)
  if (!llama && g.ffn != 4 * g.width) refuse(1, "GPT-2's MLP is 4 × the width");
  if (llama) {
    g.theta = named(b, "theta", 10000);
    g.eps = named(b, "eps", 1e-5);
    if (b.named.count("linear")) {
      g.scaling.kind = kernels::RopeScaling::Kind::Linear;
      g.scaling.factor = b.named.at("linear");
    } else if (b.named.count("llama3")) {
      g.scaling = {kernels::RopeScaling::Kind::Llama3, b.named.at("llama3"), named(b, "low", 1),
                   named(b, "high", 4), named(b, "orig", 8192)};
    }
  }
  const char* norm = llama ? "rmsnorm" : "ln";
  if (i >= layers.size() || layers[i].name != norm) refuse(i, std::string("expected the final ") + norm);
  if (named(layers[i], "eps", 1e-5) != g.eps)
    refuse(i, "config.json has one norm eps for the blocks and the final norm");
  if (i + 1 >= layers.size() || layers[i + 1].name != "lm_head") refuse(i + 1, "expected lm_head");
  if (i + 2 != layers.size()) refuse(i + 2, "nothing may follow lm_head");
  g.tied = named(layers[i + 1], "tied", 1) == 1;
  if (!llama && !g.tied) refuse(i + 1, "GPT-2's head is tied to the embedding");
  return g;
}

std::optional<HfName> hf_name_of(const std::string& name, Family family) {
  static const std::regex block(R"((\d+)\.(block|llama_block)\.(.+))"),
      final_norm(R"((\d+)\.(ln|rmsnorm)\.(.+))"), head(R"((\d+)\.lm_head\.weight)");
  static const std::map<std::string, HfName> gpt_parts = {{"ln1.gamma", {"ln_1.weight", false}},
                                                          {"ln1.beta", {"ln_1.bias", false}},
                                                          {"attn.qkv.weight", {"attn.c_attn.weight", true}},
                                                          {"attn.qkv.bias", {"attn.c_attn.bias", false}},
                                                          {"attn.proj.weight", {"attn.c_proj.weight", true}},
                                                          {"attn.proj.bias", {"attn.c_proj.bias", false}},
                                                          {"ln2.gamma", {"ln_2.weight", false}},
                                                          {"ln2.beta", {"ln_2.bias", false}},
                                                          {"mlp.fc.weight", {"mlp.c_fc.weight", true}},
                                                          {"mlp.fc.bias", {"mlp.c_fc.bias", false}},
                                                          {"mlp.proj.weight", {"mlp.c_proj.weight", true}},
                                                          {"mlp.proj.bias", {"mlp.c_proj.bias", false}}};
  static const std::map<std::string, HfName> llama_parts = {
      {"ln1.weight", {"input_layernorm.weight", false}},
      {"attn.q.weight", {"self_attn.q_proj.weight", false}},
      {"attn.k.weight", {"self_attn.k_proj.weight", false}},
      {"attn.v.weight", {"self_attn.v_proj.weight", false}},
      {"attn.proj.weight", {"self_attn.o_proj.weight", false}},
      {"ln2.weight", {"post_attention_layernorm.weight", false}},
      {"mlp.gate.weight", {"mlp.gate_proj.weight", false}},
      {"mlp.up.weight", {"mlp.up_proj.weight", false}},
      {"mlp.down.weight", {"mlp.down_proj.weight", false}}};
  const bool llama = family == Family::Llama;
  if (name == "0.embed.token")
    return HfName{llama ? "model.embed_tokens.weight" : "transformer.wte.weight", false};
  if (name == "0.embed.position" && !llama) return HfName{"transformer.wpe.weight", false};
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    const auto& parts = llama ? llama_parts : gpt_parts;
    const auto it = parts.find(m[3].str());
    if (it == parts.end()) return std::nullopt;
    const std::string index = std::to_string(std::stoll(m[1].str()) - 1);
    return HfName{(llama ? "model.layers." : "transformer.h.") + index + "." + it->second.name,
                  it->second.transpose};
  }
  if (std::regex_match(name, m, final_norm)) {
    if (llama)
      return m[3] == "weight" ? std::optional<HfName>(HfName{"model.norm.weight", false}) : std::nullopt;
    return HfName{std::string("transformer.ln_f.") + (m[3] == "gamma" ? "weight" : "bias"), false};
  }
  if (std::regex_match(name, m, head)) return HfName{"lm_head.weight", false};
  return std::nullopt;
}

std::string hf_config_json(const LmShape& g) {
  nlohmann::ordered_json j;
  auto token = [](const std::optional<int64_t>& id) { return id ? json(*id) : json(nullptr); };
  if (g.family == Family::Gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = g.vocab;
    j["n_positions"] = g.positions;
    j["n_ctx"] = g.positions;
    j["n_embd"] = g.width;
    j["n_layer"] = g.layers;
    j["n_head"] = g.heads;
    j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = g.eps;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["tie_word_embeddings"] = true;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = g.vocab;
    j["hidden_size"] = g.width;
    j["intermediate_size"] = g.ffn;
    j["num_hidden_layers"] = g.layers;
    j["num_attention_heads"] = g.heads;
    j["num_key_value_heads"] = g.kv_heads;
    j["head_dim"] = g.width / g.heads;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = g.positions > 0 ? g.positions : g.context;
    j["rms_norm_eps"] = g.eps;
    j["rope_theta"] = g.theta;
    switch (g.scaling.kind) {
      case kernels::RopeScaling::Kind::None:
        j["rope_scaling"] = nullptr;
        break;
      case kernels::RopeScaling::Kind::Linear:
        j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", g.scaling.factor}};
        break;
      case kernels::RopeScaling::Kind::Llama3:
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", g.scaling.factor},
                             {"low_freq_factor", g.scaling.low_freq_factor},
                             {"high_freq_factor", g.scaling.high_freq_factor},
                             {"original_max_position_embeddings", int64_t(g.scaling.original_context)}};
        break;
    }
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["mlp_bias"] = false;
    j["initializer_range"] = 0.02;
    j["pretraining_tp"] = 1;
    j["use_cache"] = true;
    j["tie_word_embeddings"] = g.tied;
  }
  j["bos_token_id"] = token(g.bos);
  j["eos_token_id"] = token(g.eos);
  j["torch_dtype"] = g.torch_dtype;
  return j.dump(2) + "\n";
}

LmShape lm_shape_from_config(const std::string& text, int64_t context, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UserError(what + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw UserError(what + ": not a JSON object");
  auto get_int = [&](const char* key) -> int64_t {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
      throw UserError(what + ": \"" + key + "\" is missing or not a positive whole number");
    return j[key].get<int64_t>();
  };
  auto get_num = [&](const char* key, double fallback) -> double {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) throw UserError(what + ": \"" + key + "\" is not a number");
    return j[key].get<double>();
  };
  auto token = [&](const char* key) -> std::optional<int64_t> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    const json& v =
        j[key].is_array() && !j[key].empty() ? j[key][0] : j[key];  // Llama 3 instruct: a list of eos
    if (!v.is_number_integer()) throw UserError(what + ": \"" + key + "\" is not a token id");
    return v.get<int64_t>();
  };
  const std::string type = j.value("model_type", std::string());
  LmShape g;
  g.bos = token("bos_token_id");
  g.eos = token("eos_token_id");
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
    g.torch_dtype = j["torch_dtype"].get<std::string>();
  g.vocab = get_int("vocab_size");
  if (type == "gpt2") {
    g.family = Family::Gpt2;
    g.width = get_int("n_embd");
    g.layers = get_int("n_layer");
    g.heads = get_int("n_head");
    g.kv_heads = g.heads;
    g.positions = get_int("n_positions");
    g.ffn = j.contains("n_inner") && !j["n_inner"].is_null() ? get_int("n_inner") : 4 * g.width;
    g.eps = get_num("layer_norm_epsilon", 1e-5);
    const std::string act = j.value("activation_function", std::string("gelu_new"));
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw UserError(what + ": activation_function \"" + act +
                      "\" is not GPT-2's tanh GELU, the one hpctrain has");
    if (g.ffn != 4 * g.width) throw UserError(what + ": n_inner must be 4 × n_embd (hpctrain's GPT-2 MLP)");
    if (g.eps != 1e-5) throw UserError(what + ": layer_norm_epsilon must be 1e-5 (hpctrain's GPT-2 blocks)");
  } else if (type == "llama") {
    g.family = Family::Llama;
    g.width = get_int("hidden_size");
    g.layers = get_int("num_hidden_layers");
    g.heads = get_int("num_attention_heads");
    g.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? get_int("num_key_value_heads")
                     : g.heads;
    g.ffn = get_int("intermediate_size");
    g.positions = j.contains("max_position_embeddings") ? get_int("max_position_embeddings") : 2048;
    g.eps = get_num("rms_norm_eps", 1e-6);
    g.theta = get_num("rope_theta", 10000);
    g.tied = j.value("tie_word_embeddings", false);
    const std::string act = j.value("hidden_act", std::string("silu"));
    if (act != "silu") throw UserError(what + ": hidden_act \"" + act + "\" is not Llama's silu (SwiGLU)");
    if (j.value("attention_bias", false) || j.value("mlp_bias", false))
      throw UserError(what + ": attention_bias / mlp_bias: hpctrain's Llama projections have no biases");
    if (g.heads % g.kv_heads != 0)
      throw UserError(what + ": num_attention_heads " + std::to_string(g.heads) +
                      " is not a multiple of num_key_value_heads " + std::to_string(g.kv_heads));
    if (g.width % g.heads != 0 ||
        (j.contains("head_dim") && !j["head_dim"].is_null() && get_int("head_dim") != g.width / g.heads))
      throw UserError(what + ": head_dim must be hidden_size / num_attention_heads (hpctrain's attention)");
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      const json& s = j["rope_scaling"];
      const std::string kind = s.value("rope_type", s.value("type", std::string("?")));
      auto factor = [&](const char* key, double fallback) {
        if (!s.contains(key)) return fallback;
        if (!s[key].is_number()) throw UserError(what + ": rope_scaling." + key + " is not a number");
        return s[key].get<double>();
      };
      if (kind == "linear") {
        g.scaling.kind = kernels::RopeScaling::Kind::Linear;
        g.scaling.factor = factor("factor", 1);
      } else if (kind == "llama3") {
        g.scaling = {kernels::RopeScaling::Kind::Llama3, factor("factor", 8), factor("low_freq_factor", 1),
                     factor("high_freq_factor", 4), factor("original_max_position_embeddings", 8192)};
      } else if (kind != "default") {
        throw UserError(what + ": rope_scaling of type \"" + kind +
                        "\" is not supported (hpctrain has the llama3 and linear scalings)");
      }
    }
  } else {
    throw UserError(what + ": model_type \"" + type +
                    "\" is not one hpctrain has (gpt2: GPT2LMHeadModel, llama: LlamaForCausalLM)");
  }
  g.context = context > 0 ? context : std::min<int64_t>(g.positions, 2048);
  if (g.family == Family::Gpt2 && g.context > g.positions)
    throw UserError(what + ": a context of " + std::to_string(g.context) + " tokens is past GPT-2's " +
                    std::to_string(g.positions) + " learned positions (n_positions)");
  return g;
}

std::string spec_of(const LmShape& g) {
  const bool llama = g.family == Family::Llama;
  using nn::number_text;
  std::ostringstream s;
  s << "embed(" << g.vocab << "," << g.width << "," << g.context;
  if (llama)
    s << ",positions=0";
  else if (g.positions != g.context)
    s << ",positions=" << g.positions;
  s << ")";
  for (int64_t i = 0; i < g.layers; ++i) {
    s << (llama ? " llama_block(" : " block(") << g.heads;
    if (g.kv_heads != g.heads) s << ",kv_heads=" << g.kv_heads;
    s << ",ffn=" << g.ffn;
    if (llama) {
      s << ",theta=" << number_text(g.theta) << ",eps=" << number_text(g.eps);
      if (g.scaling.kind == kernels::RopeScaling::Kind::Linear)
        s << ",linear=" << number_text(g.scaling.factor);
      if (g.scaling.kind == kernels::RopeScaling::Kind::Llama3)
        s << ",llama3=" << number_text(g.scaling.factor) << ",low=" << number_text(g.scaling.low_freq_factor)
          << ",high=" << number_text(g.scaling.high_freq_factor)
          << ",orig=" << number_text(g.scaling.original_context);
    }
    s << ",layers=" << g.layers << ")";
  }
  s << (llama ? " rmsnorm(eps=" : " ln(eps=") << number_text(g.eps) << ") lm_head(" << g.vocab
    << (g.tied ? "" : ",tied=0") << ")";
  return s.str();
}

}  // namespace hpc::train
