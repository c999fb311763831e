// torchvision ResNet names (see torchvision_layout.h).
#include "train/torchvision_layout.h"

#include <vector>

#include "nn/spec.h"

namespace hpc::train {

namespace {

bool body_is(const nn::LayerArgs& res, const std::vector<std::string>& kinds) {
  if (res.children.size() != kinds.size()) return false;
  for (size_t j = 0; j < kinds.size(); ++j)
    if (res.children[j].name != kinds[j]) return false;
  return true;
}

}  // namespace

std::map<std::string, std::string> torchvision_resnet_names(const nn::Model& model) {
  const std::vector<nn::LayerArgs> layers = nn::parse_spec(model.spec());
  const std::vector<std::string> bottleneck = {"conv", "bn", "relu", "conv", "bn", "relu", "conv", "bn"},
                                 basic = {"conv", "bn", "relu", "conv", "bn"};
  const size_t n = layers.size();
  if (n < 8 || layers[0].name != "conv" || layers[1].name != "bn" || layers[2].name != "relu" ||
      layers[3].name != "maxpool" || layers[n - 2].name != "gap" || layers[n - 1].name != "linear")
    return {};
  std::map<std::string, bool> has_param;
  for (const nn::ParamInfo& p : model.param_info()) has_param[p.name] = true;

  // Layer prefix → torchvision module prefix.
  std::map<std::string, std::string> prefix = {{"0.conv.", "conv1."}, {"1.bn.", "bn1."}};
  prefix[std::to_string(n - 1) + ".linear."] = "fc.";
  int stage = 0, block = 0;
  for (size_t i = 4; i + 2 < n; i += 2) {
    const nn::LayerArgs& res = layers[i];
    if (res.name != "res" || layers[i + 1].name != "relu") return {};
    if (!body_is(res, bottleneck) && !body_is(res, basic)) return {};
    const std::string p = std::to_string(i) + ".res.";
    const bool projection = has_param.count(p + "shortcut.0.weight") > 0;
    if (stage == 0 || projection) {
      ++stage;
      block = 0;
    }
    const std::string tv = "layer" + std::to_string(stage) + "." + std::to_string(block++) + ".";
    int conv = 0, bn = 0;
    for (size_t j = 0; j < res.children.size(); ++j) {
      const std::string& kind = res.children[j].name;
      if (kind == "relu") continue;
      prefix[p + "body." + std::to_string(j) + "."] =
          tv + (kind == "conv" ? "conv" + std::to_string(++conv) : "bn" + std::to_string(++bn)) + ".";
    }
    if (projection) {
      prefix[p + "shortcut.0."] = tv + "downsample.0.";
      prefix[p + "shortcut.1."] = tv + "downsample.1.";
    }
  }
  if (stage == 0) return {};

  // Every bn's buffers beside its gamma: running_mean, running_var.
  std::vector<std::string> names;
  for (const nn::ParamInfo& p : model.param_info()) {
    names.push_back(p.name);
    const size_t dot = p.name.rfind('.');
    if (p.name.substr(dot + 1) == "gamma")
      for (const char* b : {"running_mean", "running_var"}) names.push_back(p.name.substr(0, dot + 1) + b);
  }
  std::map<std::string, std::string> out;
  for (const std::string& name : names) {
    const size_t dot = name.rfind('.');
    auto it = prefix.find(name.substr(0, dot + 1));
    if (it == prefix.end()) return {};
    std::string leaf = name.substr(dot + 1);
    if (leaf == "gamma") leaf = "weight";
    if (leaf == "beta") leaf = "bias";
    out[name] = it->second + leaf;
  }
  return out;
}

}  // namespace hpc::train
