// The safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [b, e]},
// "__metadata__": {string: string}}, then the tensors' raw little-endian
// bytes (offsets relative to the end of the header). Written and read here
// by hand: the format is that small, and no library for it is packaged.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hpc::train {

struct NamedArray {
  std::string name;
  Shape shape;
  const float* data = nullptr;  // float32, shape.count() values
};

// The bytes of a safetensors file holding `arrays` (F32) and `meta`.
std::string safetensors_bytes(const std::vector<NamedArray>& arrays,
                              const std::vector<std::pair<std::string, std::string>>& meta);

// Every tensor of a safetensors file, as float32 host tensors by name.
// UserError ("safetensors file 'PATH': …") for a malformed or truncated file
// or a dtype other than F32 (F64 is converted).
std::map<std::string, Tensor> read_safetensors(const std::string& path);

}  // namespace hpc::train
