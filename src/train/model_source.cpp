// The model eval, predict, sample and export work from (see model_source.h).
#include "train/model_source.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "text/stored.h"
#include "train/hf_layout.h"
#include "train/model_init.h"
#include "train/weight_files.h"

namespace hpc::train {

namespace {

bool is_hdf5(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f && std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8);
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError("cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The tokenizer hpcdata stored in the run's data file, when the file is still there and has one.
void stored_tokenizer(ModelSource& s) {
  const std::string data = ini_value(s.config_ini, "data", "path");
  std::error_code ec;
  if (data.empty() || !std::filesystem::exists(data, ec)) return;
  const std::optional<text::StoredTokenizer> t = text::read_stored_tokenizer(data);
  if (!t) return;
  s.tokenizer_bytes = t->bytes;
  s.tokenizer_file = t->format == "sentencepiece" ? "tokenizer.model" : "tokenizer.json";
  s.tokenizer_origin = "the training data '" + data + "'";
  if (t->bos_id >= 0) s.bos = t->bos_id;
  if (t->eos_id >= 0) s.eos = t->eos_id;
}

ModelSource from_checkpoint(const std::string& path) {
  const ckpt::Checkpoint c = ckpt::read_checkpoint(path);
  ModelSource s;
  s.path = path;
  s.what = "checkpoint '" + path + "'";
  s.checkpoint = true;
  s.spec = c.spec;
  s.input_shape = c.input_shape;
  s.params = c.params;
  s.buffers = c.buffers;
  s.step = c.step;
  s.config_ini = c.config_ini;
  s.batch_size = c.batch_size;
  s.dtype = precision_of_ini(c.config_ini);
  stored_tokenizer(s);
  return s;
}

// "[64]" or "[1, 28, 28]" (export --format torch's hpctrain_input_shape) as a Shape.
Shape parse_shape(const std::string& text, const std::string& what) {
  std::vector<int64_t> dims;
  std::string digits;
  for (char ch : text + ",") {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      digits += ch;
    } else if (!digits.empty()) {
      dims.push_back(std::stoll(digits));
      digits.clear();
    }
  }
  if (dims.empty()) throw UserError(what + ": its hpctrain_input_shape '" + text + "' names no dimension");
  return Shape(dims);
}

}  // namespace

std::string ini_value(const std::string& ini, const std::string& section, const std::string& key) {
  std::istringstream in(ini);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '[') {
      inside = line.rfind("[" + section + "]", 0) == 0;
      continue;
    }
    const size_t eq = line.find('=');
    if (!inside || eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    k.erase(k.find_last_not_of(" \t") + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t") + 1);
    if (k == key) return v;
  }
  return "";
}

DType precision_of_ini(const std::string& ini) {
  static const std::regex line(R"(^\s*precision\s*=\s*(\w+))");
  std::istringstream in(ini);
  bool train_section = false;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l[0] == '[') train_section = l.rfind("[train]", 0) == 0;
    std::smatch m;
    if (train_section && std::regex_search(l, m, line))
      return m[1] == "bf16" ? DType::BF16 : m[1] == "fp16" ? DType::F16 : DType::F32;
  }
  return DType::F32;
}

ModelSource load_model_source(const Config& cfg) {
  if (!cfg.checkpoint.empty()) return from_checkpoint(cfg.checkpoint);
  const std::string& path = cfg.model.init;
  if (!std::filesystem::is_directory(path) && is_hdf5(path)) return from_checkpoint(path);
  const WeightFiles files(path);
  ModelSource s;
  s.path = path;
  s.what = "model '" + path + "'";
  if (const std::string tok = files.tokenizer_path(); !tok.empty()) {
    s.tokenizer_bytes = read_bytes(tok);
    s.tokenizer_file = std::filesystem::path(tok).filename().string();
    s.tokenizer_origin = "'" + tok + "'";
  }
  const std::string stored = files.dtype();
  s.dtype = stored == "BF16" ? DType::BF16 : stored == "F16" ? DType::F16 : DType::F32;
  std::string model_what = "this model";
  const auto spec_meta = files.metadata().find("hpctrain_spec");
  if (spec_meta != files.metadata().end()) {  // export --format torch: hpctrain's names and spec
    s.spec = spec_meta->second;
    const auto shape_meta = files.metadata().find("hpctrain_input_shape");
    if (shape_meta != files.metadata().end()) {
      s.input_shape = parse_shape(shape_meta->second, s.what);
    } else {
      const int64_t t = nn::spec_context(nn::parse_spec(s.spec));
      if (t == 0)
        throw UserError(s.what + ": the file does not say its model's input shape (export it again)");
      s.input_shape = Shape{cfg.model.context > 0 ? cfg.model.context : t};
    }
    const auto step = files.metadata().find("step");
    if (step != files.metadata().end()) s.step = std::stoll(step->second);
  } else {
    if (files.config_text().empty())
      throw UserError(s.what +
                      ": Hugging Face weights need their config.json (give the directory that holds both)");
    const LmShape shape =
        lm_shape_from_config(files.config_text(), cfg.model.context, s.what + ": config.json");
    s.spec = spec_of(shape);
    s.input_shape = Shape{shape.context};
    s.bos = shape.bos;
    s.eos = shape.eos;
    model_what = "the model of its config.json";
  }
  nn::Model model(s.spec, s.input_shape, DType::F32, 0, Device::CPU);
  init_model(model, path, "", model_what);
  s.spec = model.spec();
  s.params = Tensor(model.params().shape(), DType::F32);
  backend::copy(model.params(), s.params);
  for (auto& [name, t] : model.buffers()) {
    Tensor copy(t.shape(), DType::F32);
    backend::copy(t, copy);
    s.buffers.push_back({name, copy});
  }
  return s;
}

}  // namespace hpc::train
