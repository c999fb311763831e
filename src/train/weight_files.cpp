// Weight files in the Hugging Face layout (see weight_files.h).
#include "train/weight_files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.h"

namespace hpc::train {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError("cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const std::string INDEX = "model.safetensors.index.json";

}  // namespace

WeightFiles::WeightFiles(const std::string& path) : path_(path) {
  directory_ = fs::is_directory(path);
  if (!directory_) {
    if (!fs::exists(path)) throw UserError("'" + path + "': no such file or directory");
    files_.push_back(std::make_unique<SafetensorsFile>(path));
  } else {
    const std::string& dir = path;
    if (fs::exists(dir + "/config.json")) config_ = read_text(dir + "/config.json");
    if (fs::exists(dir + "/model.safetensors")) {
      files_.push_back(std::make_unique<SafetensorsFile>(dir + "/model.safetensors"));
    } else if (fs::exists(dir + "/" + INDEX)) {
      const std::string what = "'" + dir + "/" + INDEX + "'";
      nlohmann::json index;
      try {
        index = nlohmann::json::parse(read_text(dir + "/" + INDEX));
      } catch (const nlohmann::json::parse_error& e) {
        throw UserError(what + ": not valid JSON (" + e.what() + ")");
      }
      if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
        throw UserError(what + ": has no \"weight_map\" object");
      std::map<std::string, const SafetensorsFile*> shards;
      for (const auto& [name, shard] : index["weight_map"].items()) {
        if (!shard.is_string()) throw UserError(what + ": tensor '" + name + "' names no shard file");
        const std::string file = shard.get<std::string>();
        if (file.find('/') != std::string::npos || file.empty())
          throw UserError(what + ": shard '" + file + "' is not a file name in the directory");
        auto it = shards.find(file);
        if (it == shards.end()) {
          if (!fs::exists(dir + "/" + file))
            throw UserError(what + " names the shard '" + file + "' (for tensor '" + name +
                            "'), which is missing");
          files_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + file));
          it = shards.emplace(file, files_.back().get()).first;
        }
        if (!it->second->entries().count(name))
          throw UserError(what + " puts tensor '" + name + "' in '" + file + "', which does not hold it");
        where_[name] = it->second;
      }
      if (files_.empty()) throw UserError(what + ": the weight map is empty");
      return;
    } else {
      throw UserError("'" + dir + "': the directory holds neither model.safetensors nor " + INDEX);
    }
  }
  for (const auto& [name, e] : files_.front()->entries()) where_[name] = files_.front().get();
}

WeightFiles::~WeightFiles() = default;

std::string WeightFiles::tokenizer_path() const {
  if (!directory_) return "";
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(path_ + "/" + name)) return path_ + "/" + name;
  return "";
}

const SafetensorsEntry& WeightFiles::entry(const std::string& name) const {
  const auto it = where_.find(name);
  HPC_ASSERT(it != where_.end(), "WeightFiles: no tensor " + name);
  return it->second->entries().at(name);
}

void WeightFiles::read_f32(const std::string& name, float* out) const {
  const auto it = where_.find(name);
  HPC_ASSERT(it != where_.end(), "WeightFiles: no tensor " + name);
  it->second->read_f32(name, out);
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> v;
  for (const auto& [name, f] : where_) v.push_back(name);
  return v;
}

std::string WeightFiles::dtype() const {
  std::string d;
  for (const auto& f : files_) {
    const std::string fd = f->dtype();
    if (fd.empty()) continue;
    if (!d.empty() && d != fd) return "mixed";
    d = fd;
  }
  return d;
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = ok ? 0 : errno;
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return;
  const int e = err ? err : errno;
  std::error_code ignored;
  fs::remove(tmp, ignored);
  if (e == ENOSPC || e == EDQUOT) throw IoError("cannot write '" + path + "': " + std::strerror(e));
  throw UserError("cannot write '" + path + "'" + (e ? std::string(": ") + std::strerror(e) : ""));
}

std::vector<std::string> write_weight_files(const std::string& dir, const std::vector<NamedArray>& arrays,
                                            const std::vector<std::pair<std::string, std::string>>& meta,
                                            DType dtype, uint64_t max_shard_bytes) {
  const size_t width = dtype_size(dtype);
  std::vector<std::vector<NamedArray>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const NamedArray& a : arrays) {
    const uint64_t bytes = uint64_t(a.shape.count()) * width;
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(a);
    in_shard += bytes;
    total += bytes;
  }
  std::vector<std::string> written;
  std::error_code ignored;
  if (shards.size() == 1) {
    write_safetensors(dir + "/model.safetensors", arrays, meta, dtype);
    written.emplace_back("model.safetensors");
    fs::remove(dir + "/" + INDEX, ignored);
  } else {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    char name[64];
    for (size_t k = 0; k < shards.size(); ++k) {
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
      write_safetensors(dir + "/" + name, shards[k], meta, dtype);
      for (const NamedArray& a : shards[k]) map[a.name] = name;
      written.emplace_back(name);
    }
    index["weight_map"] = map;
    write_text_file(dir + "/" + INDEX, index.dump(2) + "\n");
    written.push_back(INDEX);
    fs::remove(dir + "/model.safetensors", ignored);
  }
  // Shards of an earlier export with another count would shadow nothing but confuse a reader: gone.
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ignored)) {
    const std::string n = e.path().filename().string();
    if (std::regex_match(n, shard) && std::find(written.begin(), written.end(), n) == written.end())
      fs::remove(e.path(), ignored);
  }
  return written;
}

}  // namespace hpc::train
