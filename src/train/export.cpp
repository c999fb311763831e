// hpctrain export (see export.h).
#include "train/export.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "nn/model.h"
#include "train/hf_layout.h"
#include "train/metrics.h"
#include "train/safetensors.h"
#include "train/torchvision_layout.h"

namespace hpc::train {

namespace {

// `bytes` to `path` through PATH.tmp-PID and a rename: complete or absent.
void write_file(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp);
      throw UserError("cannot write '" + path + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::filesystem::remove(tmp);
    throw UserError("cannot write '" + path + "' (rename failed: " + std::strerror(errno) + ")");
  }
}

// model.py with `NAME = None` (a line of its own in the template) set to `value`.
std::string set_line(std::string py, const std::string& name, const std::string& value) {
  const std::string line = "\n" + name + " = None\n";
  const size_t at = py.find(line);
  HPC_ASSERT(at != std::string::npos && py.find(line, at + 1) == std::string::npos,
             "model.py: no single line '" + name + " = None' to fill in");
  return py.replace(at, line.size(), "\n" + name + " = " + value + "\n");
}

void export_torch(const ckpt::Checkpoint& c, const nn::Model& model, const std::string& dir) {
  std::vector<NamedArray> arrays;
  for (const nn::ParamInfo& p : model.param_info())
    arrays.push_back({p.name, p.shape, c.params.data<float>() + p.offset});
  for (const ckpt::NamedTensor& b : c.buffers)
    arrays.push_back({b.name, b.value.shape(), b.value.data<float>()});
  std::string shape = "(";
  for (int d = 0; d < c.input_shape.rank(); ++d) shape += std::to_string(c.input_shape[d]) + ", ";
  shape += ")";
  write_file(dir + "/model.safetensors",
             safetensors_bytes(
                 arrays, {{"format", "pt"}, {"hpctrain_spec", c.spec}, {"step", std::to_string(c.step)}}));
  const std::string py = set_line(torch_model_py(), "SPEC", json_quote(model.spec()));
  write_file(dir + "/model.py", set_line(py, "INPUT_SHAPE", shape));
}

// A ResNet in torchvision's layout also gets torchvision.safetensors: its tensors under
// torchvision.models.resnet*'s state_dict names (num_batches_tracked 0), so
// resnet50(num_classes=K).load_state_dict() takes the file as it is. False for other models.
bool export_torchvision(const ckpt::Checkpoint& c, const nn::Model& model, const std::string& dir) {
  const std::map<std::string, std::string> names = torchvision_resnet_names(model);
  if (names.empty()) return false;
  std::map<std::string, const float*> data;
  for (const nn::ParamInfo& p : model.param_info()) data[p.name] = c.params.data<float>() + p.offset;
  for (const ckpt::NamedTensor& b : c.buffers) data[b.name] = b.value.data<float>();
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
  write_file(dir + "/torchvision.safetensors", safetensors_bytes(arrays, {{"format", "pt"}}));
  return true;
}

// config.json + model.safetensors as GPT2LMHeadModel.save_pretrained writes them (float32, lm_head tied).
void export_hf(const ckpt::Checkpoint& c, const nn::Model& model, const std::string& dir,
               const std::string& what) {
  const GptShape g = gpt_shape_of(model, what);
  std::vector<Tensor> transposed;  // keeps the Conv1D copies alive until the file is written
  std::vector<NamedArray> arrays;
  for (const nn::ParamInfo& p : model.param_info()) {
    const std::optional<HfName> h = hf_name_of(p.name);
    if (!h) throw UserError(what + ": parameter '" + p.name + "' has no Hugging Face GPT-2 name");
    const float* src = c.params.data<float>() + p.offset;
    if (!h->transpose) {
      arrays.push_back({h->name, p.shape, src});
      continue;
    }
    const int64_t r = p.shape[0], k = p.shape[1];
    Tensor t(Shape{k, r}, DType::F32);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < k; ++j) t.data<float>()[j * r + i] = src[i * k + j];
    arrays.push_back({h->name, t.shape(), t.data<float>()});
    transposed.push_back(std::move(t));
  }
  write_file(dir + "/model.safetensors", safetensors_bytes(arrays, {{"format", "pt"}}));
  std::ostringstream j;
  j << "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
    << "  \"vocab_size\": " << g.vocab << ",\n  \"n_positions\": " << g.context
    << ",\n  \"n_ctx\": " << g.context << ",\n  \"n_embd\": " << g.width << ",\n  \"n_layer\": " << g.layers
    << ",\n  \"n_head\": " << g.heads
    << ",\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
    << "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n  \"tie_word_embeddings\": "
       "true,\n"
    << "  \"torch_dtype\": \"float32\"\n}\n";
  write_file(dir + "/config.json", j.str());
}

}  // namespace

int export_command(const Config& cfg) {
  try {
    const ckpt::Checkpoint c = ckpt::read_checkpoint(cfg.checkpoint);
    const nn::Model model(c.spec, c.input_shape, DType::F32, 0, Device::CPU);
    if (c.num_params() != model.num_params())
      throw UserError("checkpoint '" + cfg.checkpoint + "': " + std::to_string(c.num_params()) +
                      " parameters stored but its model spec has " + std::to_string(model.num_params()));
    const std::string& dir = cfg.eval.out;
    const bool hf = cfg.eval.format == ExportFormat::Hf, onnx = cfg.eval.format == ExportFormat::Onnx;
    if (hf)
      gpt_shape_of(model,
                   "export --format hf of checkpoint '" + cfg.checkpoint + "'");  // refuse before writing
    // ONNX: the whole model is built (and refused, naming a layer) before the directory is made.
    const std::string onnx_model =
        onnx ? onnx_bytes(c, model, "export --format onnx of checkpoint '" + cfg.checkpoint + "'") : "";
    std::error_code ec;
    std::filesystem::create_directory(dir, ec);
    if (!std::filesystem::is_directory(dir))
      throw UserError("option --out: cannot create the directory '" + dir + "'" +
                      (ec ? ": " + ec.message() : ""));
    // Files of an earlier export (another format, another model) would sit beside the new ones.
    if (!cfg.eval.force && !std::filesystem::is_empty(dir, ec))
      throw UserError("option -o/--out: the directory '" + dir +
                      "' already holds files: give a new or empty one, or --force to write into it");
    if (onnx) {
      write_file(dir + "/model.onnx", onnx_model);
      std::printf("export: %s (step %lld, %lld parameters) → %s/model.onnx (opset 13)\n",
                  cfg.checkpoint.c_str(), static_cast<long long>(c.step),
                  static_cast<long long>(c.num_params()), dir.c_str());
      return EXIT_OK;
    }
    if (hf)
      export_hf(c, model, dir, "export --format hf of checkpoint '" + cfg.checkpoint + "'");
    else
      export_torch(c, model, dir);
    const std::string torchvision = !hf && export_torchvision(c, model, dir)
                                        ? ", " + dir + "/torchvision.safetensors (torchvision names)"
                                        : "";
    std::printf("export: %s (step %lld, %lld parameters) → %s/model.safetensors, %s/%s%s\n",
                cfg.checkpoint.c_str(), static_cast<long long>(c.step),
                static_cast<long long>(c.num_params()), dir.c_str(), dir.c_str(),
                hf ? "config.json (Hugging Face GPT-2 layout)" : "model.py", torchvision.c_str());
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
