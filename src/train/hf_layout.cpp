// The Hugging Face GPT-2 layout (see hf_layout.h).
#include "train/hf_layout.h"

#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "nn/spec.h"

namespace hpc::train {

GptShape gpt_shape_of(const nn::Model& model, const std::string& what) {
  const std::vector<nn::LayerArgs> layers = nn::parse_spec(model.spec());
  GptShape g;
  auto refuse = [&](size_t i, const std::string& why) {
    throw UserError(what + ": layer " + std::to_string(i) + " '" + layers[i].name +
                    "' has no Hugging Face GPT-2 counterpart (" + why +
                    "; the hf layout is for embed block… ln lm_head models, use --format torch)");
  };
  if (layers.empty() || layers[0].name != "embed") refuse(0, "a GPT-2 starts with the embedding");
  size_t i = 1;
  for (; i < layers.size() && layers[i].name == "block"; ++i) {
    const int64_t h = static_cast<int64_t>(layers[i].positional.at(0));
    if (g.heads != 0 && h != g.heads) refuse(i, "every GPT-2 block has the same number of heads");
    g.heads = h;
  }
  g.layers = static_cast<int64_t>(i) - 1;
  if (g.layers == 0) refuse(std::min(i, layers.size() - 1), "no transformer block after the embedding");
  if (i >= layers.size() || layers[i].name != "ln")
    refuse(std::min(i, layers.size() - 1), "expected the final ln");
  if (i + 1 >= layers.size() || layers[i + 1].name != "lm_head")
    refuse(std::min(i + 1, layers.size() - 1), "expected lm_head");
  if (i + 2 != layers.size()) refuse(i + 2, "nothing may follow lm_head");
  const Shape& out = model.output_shape();
  g.context = out[0];
  g.vocab = out[1];
  for (const nn::ParamInfo& p : model.param_info())
    if (p.name == "0.embed.token") g.width = p.shape[1];
  return g;
}

std::optional<HfName> hf_name_of(const std::string& name) {
  if (name == "0.embed.token") return HfName{"transformer.wte.weight", false};
  if (name == "0.embed.position") return HfName{"transformer.wpe.weight", false};
  static const std::regex block(R"((\d+)\.block\.(.+))"), final_ln(R"((\d+)\.ln\.(gamma|beta))");
  static const std::map<std::string, HfName> parts = {{"ln1.gamma", {"ln_1.weight", false}},
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
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    auto it = parts.find(m[2].str());
    if (it == parts.end()) return std::nullopt;
    return HfName{"transformer.h." + std::to_string(std::stoll(m[1].str()) - 1) + "." + it->second.name,
                  it->second.transpose};
  }
  if (std::regex_match(name, m, final_ln))
    return HfName{std::string("transformer.ln_f.") + (m[2] == "gamma" ? "weight" : "bias"), false};
  return std::nullopt;
}

}  // namespace hpc::train
