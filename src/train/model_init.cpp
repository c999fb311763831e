// --model.init (see model_init.h).
#include "train/model_init.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "train/hf_layout.h"
#include "train/weight_files.h"

namespace hpc::train {

namespace {

bool is_hdf5(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f && std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8);
}

// Where a model's tensors come from, under hpctrain's names: the shape of a
// tensor (empty when the source has none) and its float32 values.
struct Source {
  std::function<Shape(const std::string&)> shape;
  std::function<void(const std::string&, float*)> read;
  std::function<std::string(const std::string&)> file_name;  // the tensor's name in the file
  std::string layout;  // "" or " (in the Hugging Face … layout)", for messages
  bool has_buffers = true;
};

// The tensors of an hpctrain checkpoint under their names (held by `keep`).
Source checkpoint_source(const std::string& path, std::map<std::string, Tensor>& keep) {
  const ckpt::Checkpoint c = ckpt::read_checkpoint(path);
  const nn::Model source(c.spec, c.input_shape, DType::F32, 0, Device::CPU);
  if (source.num_params() != c.num_params())
    throw UserError("checkpoint '" + path + "': its parameters do not fit its model spec");
  for (const nn::ParamInfo& p : source.param_info()) keep.emplace(p.name, c.params.slice(p.offset, p.shape));
  for (const ckpt::NamedTensor& b : c.buffers) keep.emplace(b.name, b.value);
  return {[&keep](const std::string& n) { return keep.count(n) ? keep.at(n).shape() : Shape(); },
          [&keep](const std::string& n, float* out) {
            const Tensor& t = keep.at(n);
            std::copy(t.data<float>(), t.data<float>() + t.count(), out);
          },
          [](const std::string& n) { return n; }, "", true};
}

// The Hugging Face family of a file's names, if they are Hugging Face's.
std::optional<LmShape::Family> hf_family(const WeightFiles& w) {
  for (const std::string& n : w.names()) {
    if (n.rfind("model.layers.", 0) == 0 || n == "model.embed_tokens.weight") return LmShape::Family::Llama;
    if (n.rfind("transformer.", 0) == 0 || n.rfind("wte.", 0) == 0 || n.rfind("h.0.", 0) == 0)
      return LmShape::Family::Gpt2;
  }
  return std::nullopt;
}

// Safetensors weights under hpctrain's names, or Hugging Face's mapped and (GPT-2's Conv1D) transposed.
Source files_source(const WeightFiles& w, const nn::Model& model) {
  const std::optional<LmShape::Family> family = hf_family(w);
  if (!family) {
    return {[&w](const std::string& n) { return w.has(n) ? w.entry(n).shape : Shape(); },
            [&w](const std::string& n, float* out) { w.read_f32(n, out); },
            [](const std::string& n) { return n; }, "", true};
  }
  // hpctrain name → (file name, transposed)
  auto hf = std::make_shared<std::map<std::string, HfName>>();
  for (const nn::ParamInfo& p : model.param_info()) {
    std::optional<HfName> h = hf_name_of(p.name, *family);
    if (!h) continue;
    if (!w.has(h->name) && h->name.rfind("transformer.", 0) == 0)
      h->name = h->name.substr(12);  // GPT2Model's names
    if (w.has(h->name)) (*hf)[p.name] = *h;
  }
  Source s;
  s.layout =
      *family == LmShape::Family::Llama ? " (Hugging Face Llama layout)" : " (Hugging Face GPT-2 layout)";
  s.has_buffers = false;  // neither family has buffers
  s.shape = [&w, hf](const std::string& n) {
    const auto it = hf->find(n);
    if (it == hf->end()) return Shape();
    const Shape& in = w.entry(it->second.name).shape;
    return it->second.transpose && in.rank() == 2 ? Shape{in[1], in[0]} : in;
  };
  s.file_name = [hf](const std::string& n) {
    return hf->count(n) ? hf->at(n).name + " (hpctrain's " + n + ")" : n;
  };
  s.read = [&w, hf](const std::string& n, float* out) {
    const HfName& h = hf->at(n);
    const Shape& in = w.entry(h.name).shape;
    if (!h.transpose || in.rank() != 2) return w.read_f32(h.name, out);
    Tensor t(in, DType::F32);
    w.read_f32(h.name, t.data<float>());
    const int64_t r = in[0], c = in[1];
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) out[j * r + i] = t.data<float>()[i * c + j];
  };
  return s;
}

// What config.json says that the tensors' shapes cannot show, against the model built.
void check_config(const WeightFiles& w, const nn::Model& model, const std::string& what) {
  if (w.config_text().empty() || !hf_family(w)) return;
  const LmShape file = lm_shape_from_config(w.config_text(), 0, what + "/config.json");
  const LmShape ours = lm_shape_of(model, what + ": the model to load into");
  auto differ = [&](const std::string& key, const std::string& theirs, const std::string& mine) {
    throw UserError(what + "/config.json has " + key + " " + theirs + " but the model to load into has " +
                    mine + " (build it from the directory alone, or set the model options to match)");
  };
  if (file.family != ours.family)
    differ("model_type", file.family == LmShape::Family::Llama ? "llama" : "gpt2",
           ours.family == LmShape::Family::Llama ? "a llama_block" : "a GPT-2 block");
  if (file.kv_heads != ours.kv_heads)
    differ("num_key_value_heads", std::to_string(file.kv_heads), std::to_string(ours.kv_heads));
  if (file.heads != ours.heads)
    differ("num_attention_heads", std::to_string(file.heads), std::to_string(ours.heads));
  if (file.eps != ours.eps) differ("rms_norm_eps", nn::number_text(file.eps), nn::number_text(ours.eps));
  if (file.family == LmShape::Family::Llama) {
    if (file.theta != ours.theta)
      differ("rope_theta", nn::number_text(file.theta), nn::number_text(ours.theta));
    if (file.scaling.kind != ours.scaling.kind || file.scaling.factor != ours.scaling.factor)
      differ("rope_scaling", "another scaling", "its own");
    if (file.tied != ours.tied)
      differ("tie_word_embeddings", file.tied ? "true" : "false",
             ours.tied ? "a tied head" : "an untied head");
  }
}

// `name` is covered by skip entry `s`: equal, or s is a prefix ending at a dot.
bool covers(const std::string& s, const std::string& name) {
  return name == s || (name.size() > s.size() && name.compare(0, s.size(), s) == 0 && name[s.size()] == '.');
}

// Host float32 copy of `t` (any device, any float dtype) and its way back.
Tensor to_host(const Tensor& t) {
  Tensor f32 = t;
  if (t.dtype() != DType::F32) {
    f32 = Tensor(t.shape(), DType::F32, t.device());
    backend::convert(t, f32);
  }
  Tensor host(t.shape(), DType::F32);
  backend::copy(f32, host);
  return host;
}
void from_host(const Tensor& host, const Tensor& t) {
  if (t.dtype() == DType::F32) {
    backend::copy(host, t);
    return;
  }
  Tensor staged(t.shape(), DType::F32, t.device());
  backend::copy(host, staged);
  backend::convert(staged, t);
}

}  // namespace

std::string hf_init_spec(const std::string& path, int64_t context) {
  if (!std::filesystem::is_directory(path) || !std::filesystem::exists(path + "/config.json")) return "";
  std::ifstream f(path + "/config.json");
  std::ostringstream text;
  text << f.rdbuf();
  return spec_of(lm_shape_from_config(text.str(), context, "'" + path + "/config.json'"));
}

std::string init_model(nn::Model& model, const std::string& path, const std::string& skip_text,
                       const std::string& model_what) {
  const std::string what = "option --model.init: '" + path + "'";
  std::map<std::string, Tensor> kept;
  std::unique_ptr<WeightFiles> files;
  Source src;
  if (!std::filesystem::is_directory(path) && !std::filesystem::exists(path))
    throw UserError(what + ": no such file or directory");
  if (!std::filesystem::is_directory(path) && is_hdf5(path)) {
    src = checkpoint_source(path, kept);
  } else {
    files = std::make_unique<WeightFiles>(path);
    check_config(*files, model, what);
    src = files_source(*files, model);
  }

  std::vector<std::string> skip;
  std::string word;
  for (std::istringstream in(skip_text); std::getline(in, word, ',');) {
    while (!word.empty() && word.front() == ' ') word.erase(word.begin());
    while (!word.empty() && word.back() == ' ') word.pop_back();
    if (!word.empty()) skip.push_back(word);
  }
  std::vector<bool> used(skip.size(), false);
  auto skipped = [&](const std::string& name) {
    bool any = false;
    for (size_t i = 0; i < skip.size(); ++i)
      if (covers(skip[i], name)) any = used[i] = true;
    return any;
  };
  // Whether tensor `name` of `shape` is to be loaded (false: skipped); UserError when the source cannot give
  // it.
  auto wanted = [&](const std::string& name, const Shape& shape) {
    if (skipped(name)) return false;
    const Shape there = src.shape(name);
    if (there.rank() == 0)
      throw UserError(what + " has no tensor '" + name + "'" + src.layout +
                      ": leave it freshly initialised with --model.init_skip " + name);
    if (!(there == shape))
      throw UserError(what + ": tensor '" + src.file_name(name) + "' is " + there.str() + " there but " +
                      shape.str() + " in " + model_what + " (a new head? --model.init_skip " +
                      name.substr(0, name.rfind('.')) + ")");
    return true;
  };

  // What the model stores: every parameter, or its shard (dist.zero 3: elements [lo, hi) of the layout).
  Tensor params = to_host(model.params());
  const int64_t lo = model.params_lo(), hi = lo + params.count();
  int64_t loaded = 0, fresh = 0;
  for (const nn::ParamInfo& p : model.param_info()) {
    if (!wanted(p.name, p.full_shape)) {
      ++fresh;
      continue;
    }
    if (p.shard.split()) {  // dist.tp > 1: this rank's part of the whole tensor
      Tensor whole(p.full_shape, DType::F32);
      src.read(p.name, whole.data<float>());
      nn::take_shard(whole, p.shard, params.slice(p.offset, p.shape));
    } else if (model.stores_whole_params()) {
      src.read(p.name, params.data<float>() + p.offset);
    } else if (const int64_t a = std::max(p.offset, lo), b = std::min(p.offset + p.shape.count(), hi);
               a < b) {
      Tensor whole(p.shape, DType::F32);  // dist.zero 3: the part of this tensor in the shard is kept
      src.read(p.name, whole.data<float>());
      std::copy(whole.data<float>() + (a - p.offset), whole.data<float>() + (b - p.offset),
                params.data<float>() + (a - lo));
    }
    ++loaded;
  }
  from_host(params, model.params());
  for (auto& [name, b] : model.buffers()) {
    if (!src.has_buffers || !wanted(name, b.shape())) continue;
    Tensor host(b.shape(), DType::F32);
    src.read(name, host.data<float>());
    from_host(host, b);
    ++loaded;
  }
  for (size_t i = 0; i < skip.size(); ++i)
    if (!used[i]) throw UserError("option --model.init_skip: '" + skip[i] + "' names no tensor of the model");
  const std::string dtype = files ? files->dtype() : "";
  return "model.init: " + std::to_string(loaded) + " tensors from " + path + src.layout +
         (dtype.empty() || dtype == "F32" ? "" : ", " + dtype + " widened to float32") +
         (fresh ? ", " + std::to_string(fresh) + " freshly initialised (--model.init_skip)" : "");
}

}  // namespace hpc::train
