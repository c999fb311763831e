// make_layer: spec name → layer class. The table is the one place that
// lists the layer names, so "unknown layer" can name every known one.
#include <functional>
#include <map>

#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"
#include "nn/layers/transformer.h"

namespace hpc::nn {

namespace {

using Factory = std::function<std::unique_ptr<Layer>(const LayerArgs&)>;

template <typename L>
Factory plain() {
  return [](const LayerArgs& a) { return std::make_unique<L>(a); };
}

Factory pool(Pool2d::Kind kind) {
  return [kind](const LayerArgs& a) { return std::make_unique<Pool2d>(kind, a); };
}

Factory block(TransformerBlock::Family family) {
  return [family](const LayerArgs& a) { return std::make_unique<TransformerBlock>(family, a); };
}

Factory mlp(Mlp::Kind kind) {
  return [kind](const LayerArgs& a) { return std::make_unique<Mlp>(kind, a); };
}

Factory activation(kernels::ActivationKind act) {
  return [act](const LayerArgs& a) { return std::make_unique<ActivationLayer>(act, a); };
}

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table{
      {"attn", plain<Attention>()},
      {"avgpool", pool(Pool2d::Kind::Average)},
      {"block", block(TransformerBlock::Family::Gpt)},
      {"bn", plain<BatchNorm>()},
      {"conv", plain<Conv2d>()},
      {"dropout", plain<Dropout>()},
      {"embed", plain<Embedding>()},
      {"flatten", plain<Flatten>()},
      {"gap", plain<GlobalAvgPool>()},
      {"gelu", activation(kernels::ActivationKind::Gelu)},
      {"linear", plain<Linear>()},
      {"llama_block", block(TransformerBlock::Family::Llama)},
      {"lm_head", plain<LmHead>()},
      {"ln", plain<LayerNorm>()},
      {"maxpool", pool(Pool2d::Kind::Max)},
      {"mlp", mlp(Mlp::Kind::Gelu)},
      {"relu", activation(kernels::ActivationKind::Relu)},
      {"res", plain<Residual>()},
      {"rmsnorm", plain<RmsNorm>()},
      {"swiglu", mlp(Mlp::Kind::SwiGlu)},
      {"tanh", activation(kernels::ActivationKind::Tanh)},
  };
  return table;
}

}  // namespace

const std::vector<std::string>& layer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [name, f] : factories()) v.push_back(name);
    return v;
  }();
  return names;
}

std::unique_ptr<Layer> make_layer(const LayerArgs& args) {
  const auto it = factories().find(args.name);
  if (it == factories().end()) {
    std::string known;
    for (const std::string& n : layer_names()) known += (known.empty() ? "" : ", ") + n;
    throw_layer_error(args_text(args), "unknown layer '" + args.name + "' (known: " + known + ")");
  }
  return it->second(args);
}

}  // namespace hpc::nn
