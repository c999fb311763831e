// hpctrain export (see export.h).
#include "train/export.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "data/h5_dataset.h"
#include "nn/model.h"
#include "train/hf_layout.h"
#include "train/metrics.h"
#include "train/model_source.h"
#include "train/torchvision_layout.h"
#include "train/weight_files.h"

namespace hpc::train {

namespace {

// model.py with `NAME = None` (a line of its own in the template) set to `value`.
std::string set_line(std::string py, const std::string& name, const std::string& value) {
  const std::string line = "\n" + name + " = None\n";
  const size_t at = py.find(line);
  HPC_ASSERT(at != std::string::npos && py.find(line, at + 1) == std::string::npos,
             "model.py: no single line '" + name + " = None' to fill in");
  return py.replace(at, line.size(), "\n" + name + " = " + value + "\n");
}

// --dtype: auto is the dtype the model was trained in (a checkpoint's
// train.precision) or is stored in (weights one had).
DType export_dtype(const Config& cfg, const ModelSource& src) {
  const std::string& d = cfg.exporting.dtype;
  if (d == "fp32") return DType::F32;
  if (d == "bf16") return DType::BF16;
  if (d == "fp16") return DType::F16;
  return src.dtype;
}

std::string shape_text(const Shape& s) {
  std::string t = "(";
  for (int d = 0; d < s.rank(); ++d) t += std::to_string(s[d]) + ", ";
  return t + ")";
}

void export_torch(const ModelSource& src, const nn::Model& model, const std::string& dir, DType dtype) {
  std::vector<NamedArray> arrays;
  for (const nn::ParamInfo& p : model.param_info())
    arrays.push_back({p.name, p.shape, src.params.data<float>() + p.offset});
  for (const ckpt::NamedTensor& b : src.buffers)
    arrays.push_back({b.name, b.value.shape(), b.value.data<float>()});
  write_safetensors(dir + "/model.safetensors", arrays,
                    {{"format", "pt"},
                     {"hpctrain_spec", src.spec},
                     {"hpctrain_input_shape", shape_text(src.input_shape)},
                     {"step", std::to_string(src.step)}},
                    dtype);
  const std::string py = set_line(torch_model_py(), "SPEC", json_quote(model.spec()));
  write_text_file(dir + "/model.py", set_line(py, "INPUT_SHAPE", shape_text(src.input_shape)));
}

// A ResNet in torchvision's layout also gets torchvision.safetensors: its tensors under
// torchvision.models.resnet*'s state_dict names (num_batches_tracked 0), so
// resnet50(num_classes=K).load_state_dict() takes the file as it is. False for other models.
bool export_torchvision(const ModelSource& src, const nn::Model& model, const std::string& dir, DType dtype) {
  const std::map<std::string, std::string> names = torchvision_resnet_names(model);
  if (names.empty()) return false;
  std::map<std::string, const float*> data;
  for (const nn::ParamInfo& p : model.param_info()) data[p.name] = src.params.data<float>() + p.offset;
  for (const ckpt::NamedTensor& b : src.buffers) data[b.name] = b.value.data<float>();
  std::vector<NamedArray> arrays;
  static const float ZERO = 0;
  for (const nn::ParamInfo& p : model.param_info()) {
    arrays.push_back({names.at(p.name), p.shape, data.at(p.name)});
    const std::string& tv = names.at(p.name);
    if (tv.size() > 7 && tv.compare(tv.size() - 7, 7, ".weight") == 0 && p.shape.rank() == 1) {  // a bn
      const std::string hp = p.name.substr(0, p.name.rfind('.') + 1), mod = tv.substr(0, tv.size() - 6);
      for (const char* b : {"running_mean", "running_var"}) {
        auto it = data.find(hp + b);
        if (it == data.end()) return false;
        arrays.push_back({mod + b, p.shape, it->second});
      }
      arrays.push_back({mod + "num_batches_tracked", Shape{}, &ZERO});
    }
  }
  write_safetensors(dir + "/torchvision.safetensors", arrays, {{"format", "pt"}}, dtype);
  return true;
}

// config.json and the weights as GPT2LMHeadModel's / LlamaForCausalLM's
// save_pretrained writes them: Hugging Face's names (GPT-2's Conv1D weights
// transposed), a tied head not stored, shards with an index above the size.
std::vector<std::string> export_hf(const ModelSource& src, const nn::Model& model, const std::string& dir,
                                   DType dtype, double max_shard_mb, const std::string& what) {
  LmShape g = lm_shape_of(model, what);
  g.bos = src.bos;
  g.eos = src.eos;
  g.torch_dtype = torch_dtype_name(dtype);
  std::vector<Tensor> transposed;  // keeps the Conv1D copies alive until the file is written
  std::vector<NamedArray> arrays;
  for (const nn::ParamInfo& p : model.param_info()) {
    const std::optional<HfName> h = hf_name_of(p.name, g.family);
    if (!h) throw UserError(what + ": parameter '" + p.name + "' has no Hugging Face name");
    const float* data = src.params.data<float>() + p.offset;
    if (!h->transpose) {
      arrays.push_back({h->name, p.shape, data});
      continue;
    }
    const int64_t r = p.shape[0], k = p.shape[1];
    Tensor t(Shape{k, r}, DType::F32);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < k; ++j) t.data<float>()[j * r + i] = data[i * k + j];
    arrays.push_back({h->name, t.shape(), t.data<float>()});
    transposed.push_back(std::move(t));
  }
  std::vector<std::string> files =
      write_weight_files(dir, arrays, {{"format", "pt"}}, dtype, static_cast<uint64_t>(max_shard_mb * 1e6));
  write_text_file(dir + "/config.json", hf_config_json(g));
  files.emplace_back("config.json");
  if (!src.tokenizer_bytes
           .empty()) {  // the tokenizer the weights came with (or were trained on) travels with them
    write_text_file(dir + "/" + src.tokenizer_file, src.tokenizer_bytes);
    files.push_back(src.tokenizer_file);
  }
  return files;
}

// ONNX metadata_props: how an input is made from raw data, from the run's
// data file where it still exists (an image model's byte scaling and
// normalisation), and a language model's token ids.
std::vector<std::pair<std::string, std::string>> input_metadata(const ModelSource& src, bool language) {
  std::vector<std::pair<std::string, std::string>> meta;
  if (language) {
    meta.emplace_back("input", "input_ids: token ids [batch, seq], seq up to the model's context of " +
                                   std::to_string(src.input_shape[0]));
    if (src.bos) meta.emplace_back("bos_token_id", std::to_string(*src.bos));
    if (src.eos) meta.emplace_back("eos_token_id", std::to_string(*src.eos));
    return meta;
  }
  const std::string data = ini_value(src.config_ini, "data", "path");
  std::error_code ec;
  if (data.empty() || !std::filesystem::exists(data, ec)) {
    meta.emplace_back("input_normalization", "unknown (the training data file is not at hand)");
    return meta;
  }
  try {
    const data::H5Dataset d(data, "train");
    const data::SplitInfo& info = d.info();
    if (info.x_dtype == DType::U8) {
      meta.emplace_back("input_normalization",
                        "x = (byte * input_scale - input_mean) / input_std, per element");
      for (const auto& [k, v] : {std::pair{"input_scale", info.scale}, std::pair{"input_mean", info.mean},
                                 std::pair{"input_std", info.std}}) {
        char text[40];
        std::snprintf(text, sizeof text, "%.17g", v);
        meta.emplace_back(k, text);
      }
    } else {
      meta.emplace_back("input_normalization", "none: the float values of the training data, as they are");
    }
  } catch (const Error&) {
    meta.emplace_back("input_normalization", "unknown (the training data file could not be read)");
  }
  return meta;
}

}  // namespace

int export_command(const Config& cfg) {
  try {
    const ModelSource src = load_model_source(cfg);
    const nn::Model model(src.spec, src.input_shape, DType::F32, 0, Device::CPU);
    if (src.num_params() != model.num_params())
      throw UserError(src.what + ": " + std::to_string(src.num_params()) +
                      " parameters stored but its model spec has " + std::to_string(model.num_params()));
    const std::string& dir = cfg.eval.out;
    const bool hf = cfg.eval.format == ExportFormat::Hf, onnx = cfg.eval.format == ExportFormat::Onnx;
    const std::string what = std::string("export --format ") + name_of(cfg.eval.format) + " of " + src.what;
    const DType dtype = export_dtype(cfg, src);
    if (hf) lm_shape_of(model, what);  // refuse before writing
    // ONNX: the whole model is built (and refused, naming a layer) before the directory is made.
    const bool language = model.input_shape().rank() == 1 && model.output_shape().rank() == 2;
    const std::string onnx_model = onnx ? onnx_bytes(src, model, what, input_metadata(src, language)) : "";
    std::error_code ec;
    std::filesystem::create_directory(dir, ec);
    if (!std::filesystem::is_directory(dir))
      throw UserError("option --out: cannot create the directory '" + dir + "'" +
                      (ec ? ": " + ec.message() : ""));
    // Files of an earlier export (another format, another model) would sit beside the new ones.
    if (!cfg.eval.force && !std::filesystem::is_empty(dir, ec))
      throw UserError("option -o/--out: the directory '" + dir +
                      "' already holds files: give a new or empty one, or --force to write into it");
    std::string written;
    if (onnx) {
      write_text_file(dir + "/model.onnx", onnx_model);
      written = dir + "/model.onnx (opset " + std::to_string(ONNX_OPSET) + ", float32)";
    } else if (hf) {
      const std::vector<std::string> files =
          export_hf(src, model, dir, dtype, cfg.exporting.max_shard_mb, what);
      for (const std::string& f : files) written += (written.empty() ? "" : ", ") + dir + "/" + f;
      written += std::string(" (Hugging Face ") +
                 (lm_shape_of(model, what).family == LmShape::Family::Llama ? "LlamaForCausalLM"
                                                                            : "GPT2LMHeadModel") +
                 " layout, " + torch_dtype_name(dtype) + ")";
    } else {
      export_torch(src, model, dir, dtype);
      written = dir + "/model.safetensors, " + dir + "/model.py (" + torch_dtype_name(dtype) + ")";
      if (export_torchvision(src, model, dir, dtype))
        written += ", " + dir + "/torchvision.safetensors (torchvision names)";
    }
    std::printf("export: %s (step %lld, %lld parameters) → %s\n", src.path.c_str(),
                static_cast<long long>(src.step), static_cast<long long>(src.num_params()), written.c_str());
    return EXIT_OK;
  } catch (const Error& e) {
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return EXIT_INTERNAL;
  }
}

}  // namespace hpc::train
