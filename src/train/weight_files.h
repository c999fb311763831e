// Weights in safetensors files, as Hugging Face lays them out: one file, or
// a directory holding model.safetensors, or shards
// model-0000k-of-0000n.safetensors named tensor by tensor in
// model.safetensors.index.json ({"metadata": {"total_size": …},
// "weight_map": {name: shard}}), with config.json (and the tokenizer's
// files) beside them. WeightFiles reads them; write_weight_files writes that
// layout back, in shards above a size.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/safetensors.h"

namespace hpc::train {

class WeightFiles {
 public:
  // `path`: a safetensors file or a directory. UserError (one line, naming
  // the file) for a directory without weights, an index that is not JSON or
  // names a shard that is missing or does not hold the tensor it is said to.
  explicit WeightFiles(const std::string& path);
  ~WeightFiles();

  const std::string& path() const { return path_; }
  bool is_directory() const { return directory_; }
  // config.json's text ("" when there is none, or `path` is a file).
  const std::string& config_text() const { return config_; }
  // The tokenizer file beside the weights: tokenizer.json, else tokenizer.model ("" when none).
  std::string tokenizer_path() const;

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  void read_f32(const std::string& name, float* out) const;
  std::vector<std::string> names() const;
  // The floating dtype of every tensor ("F32", "BF16", …; "mixed"; "" when none).
  std::string dtype() const;
  // The metadata of the (first) file.
  const std::map<std::string, std::string>& metadata() const { return files_.front()->metadata(); }

 private:
  std::string path_, config_;
  bool directory_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

// Writes `arrays` in `dtype` into DIR as model.safetensors, or — when they
// take more than max_shard_bytes — as model-0000k-of-0000n.safetensors
// shards (tensors in order, a shard closed before it would pass the size)
// with model.safetensors.index.json; each file atomically. Files of the other
// form left in DIR by an earlier export are removed afterwards. Returns the
// names of the files written.
std::vector<std::string> write_weight_files(const std::string& dir, const std::vector<NamedArray>& arrays,
                                            const std::vector<std::pair<std::string, std::string>>& meta,
                                            DType dtype, uint64_t max_shard_bytes);

// `text` to `path` through PATH.tmp-PID and a rename (complete or absent).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace hpc::train
