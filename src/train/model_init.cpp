// --model.init (see model_init.h).
#include "train/model_init.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "train/hf_layout.h"
#include "train/safetensors.h"

namespace hpc::train {

namespace {

bool is_hdf5(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f && std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8);
}

// The tensors of an hpctrain checkpoint under their names.
std::map<std::string, Tensor> checkpoint_tensors(const std::string& path) {
  const ckpt::Checkpoint c = ckpt::read_checkpoint(path);
  const nn::Model source(c.spec, c.input_shape, DType::F32, 0, Device::CPU);
  if (source.num_params() != c.num_params())
    throw UserError("checkpoint '" + path + "': its parameters do not fit its model spec");
  std::map<std::string, Tensor> out;
  for (const nn::ParamInfo& p : source.param_info()) out.emplace(p.name, c.params.slice(p.offset, p.shape));
  for (const ckpt::NamedTensor& b : c.buffers) out.emplace(b.name, b.value);
  return out;
}

bool hf_layout(const std::map<std::string, Tensor>& t) {
  for (const auto& [name, x] : t)
    if (name.rfind("transformer.", 0) == 0 || name.rfind("wte.", 0) == 0) return true;
  return false;
}

// HF GPT-2 tensors under the names of `model` (transposing Conv1D weights).
std::map<std::string, Tensor> from_hf(const std::map<std::string, Tensor>& hf, const nn::Model& model) {
  std::map<std::string, Tensor> out;
  for (const nn::ParamInfo& p : model.param_info()) {
    const std::optional<HfName> h = hf_name_of(p.name);
    if (!h) continue;
    auto it = hf.find(h->name);
    if (it == hf.end())
      it = hf.find(h->name.substr(std::string("transformer.").size()));  // GPT2Model's names
    if (it == hf.end()) continue;
    const Tensor& x = it->second;
    if (!h->transpose || x.shape().rank() != 2) {
      out.emplace(p.name, x);
      continue;
    }
    const int64_t r = x.shape()[0], c = x.shape()[1];
    Tensor t(Shape{c, r}, DType::F32);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) t.data<float>()[j * r + i] = x.data<float>()[i * c + j];
    out.emplace(p.name, std::move(t));
  }
  return out;
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

std::string init_model(nn::Model& model, const std::string& path, const std::string& skip_text) {
  const std::string what = "option --model.init: '" + path + "'";
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = path + "/model.safetensors";
  if (!std::filesystem::exists(file))
    throw UserError(what + ": " +
                    (file == path ? "no such file" : "the directory holds no model.safetensors"));
  std::map<std::string, Tensor> src;
  bool hf = false;
  if (is_hdf5(file)) {
    src = checkpoint_tensors(file);
  } else {
    src = read_safetensors(file);
    hf = hf_layout(src);
    if (hf) src = from_hf(src, model);
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
  auto take = [&](const std::string& name, const Shape& shape) -> const Tensor* {
    if (skipped(name)) return nullptr;
    auto it = src.find(name);
    if (it == src.end())
      throw UserError(what + " has no tensor '" + name + "'" +
                      (hf ? " (in the Hugging Face GPT-2 layout)" : "") +
                      ": leave it freshly initialised with --model.init_skip " + name);
    if (!(it->second.shape() == shape))
      throw UserError(what + ": tensor '" + name + "' is " + it->second.shape().str() + " there but " +
                      shape.str() + " in this model (a new head? --model.init_skip " +
                      name.substr(0, name.rfind('.')) + ")");
    return &it->second;
  };

  // What the model stores: every parameter, or its shard (dist.zero 3: elements [lo, hi) of the layout).
  Tensor params = to_host(model.params());
  const int64_t lo = model.params_lo(), hi = lo + params.count();
  int64_t loaded = 0, fresh = 0;
  for (const nn::ParamInfo& p : model.param_info()) {
    const Tensor* t = take(p.name, p.shape);
    if (!t) {
      ++fresh;
      continue;
    }
    const int64_t a = std::max(p.offset, lo), b = std::min(p.offset + t->count(), hi);
    if (a < b)
      std::copy(t->data<float>() + (a - p.offset), t->data<float>() + (b - p.offset),
                params.data<float>() + (a - lo));
    ++loaded;
  }
  from_host(params, model.params());
  for (auto& [name, b] : model.buffers()) {
    if (hf) continue;  // GPT-2 has no buffers
    const Tensor* t = take(name, b.shape());
    if (!t) continue;
    from_host(*t, b);
    ++loaded;
  }
  for (size_t i = 0; i < skip.size(); ++i)
    if (!used[i]) throw UserError("option --model.init_skip: '" + skip[i] + "' names no tensor of the model");
  return "model.init: " + std::to_string(loaded) + " tensors from " + path +
         (hf ? " (Hugging Face GPT-2 layout)" : "") +
         (fresh ? ", " + std::to_string(fresh) + " freshly initialised (--model.init_skip)" : "");
}

}  // namespace hpc::train
