// hpctrain export (see export.h).
#include "train/export.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "nn/model.h"
#include "train/metrics.h"

namespace hpc::train {

namespace {

struct NamedArray {
  std::string name;
  Shape shape;
  const float* data = nullptr;
};

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

// The safetensors bytes of `arrays` (float32, little-endian: the host's order on every target we build for).
std::string safetensors(const std::vector<NamedArray>& arrays, const std::vector<std::pair<std::string, std::string>>& meta) {
  std::ostringstream h;
  h << "{\"__metadata__\": {";
  for (size_t i = 0; i < meta.size(); ++i)
    h << (i ? ", " : "") << json_quote(meta[i].first) << ": " << json_quote(meta[i].second);
  h << "}";
  size_t offset = 0;
  for (const NamedArray& a : arrays) {
    const size_t bytes = static_cast<size_t>(a.shape.count()) * sizeof(float);
    h << ", " << json_quote(a.name) << ": {\"dtype\": \"F32\", \"shape\": [";
    for (int d = 0; d < a.shape.rank(); ++d) h << (d ? ", " : "") << a.shape[d];
    h << "], \"data_offsets\": [" << offset << ", " << offset + bytes << "]}";
    offset += bytes;
  }
  h << "}";
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + offset);
  for (const NamedArray& a : arrays)
    out.append(reinterpret_cast<const char*>(a.data), static_cast<size_t>(a.shape.count()) * sizeof(float));
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

void export_torch(const ckpt::Checkpoint& c, const nn::Model& model, const std::string& dir) {
  std::vector<NamedArray> arrays;
  for (const nn::ParamInfo& p : model.param_info())
    arrays.push_back({p.name, p.shape, c.params.data<float>() + p.offset});
  for (const ckpt::NamedTensor& b : c.buffers) arrays.push_back({b.name, b.value.shape(), b.value.data<float>()});
  std::string shape = "(";
  for (int d = 0; d < c.input_shape.rank(); ++d) shape += std::to_string(c.input_shape[d]) + ", ";
  shape += ")";
  write_file(dir + "/model.safetensors",
             safetensors(arrays, {{"format", "pt"}, {"hpctrain_spec", c.spec}, {"step", std::to_string(c.step)}}));
  std::string py = replace_all(torch_model_py(), "@SPEC@", json_quote(model.spec()));
  write_file(dir + "/model.py", replace_all(py, "@INPUT_SHAPE@", shape));
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
    std::error_code ec;
    std::filesystem::create_directory(dir, ec);
    if (!std::filesystem::is_directory(dir))
      throw UserError("option --out: cannot create the directory '" + dir + "'" + (ec ? ": " + ec.message() : ""));
    export_torch(c, model, dir);
    std::printf("export: %s (step %lld, %lld parameters) → %s/model.safetensors, %s/model.py\n",
                cfg.checkpoint.c_str(), static_cast<long long>(c.step), static_cast<long long>(c.num_params()),
                dir.c_str(), dir.c_str());
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
