// The safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [b, e]},
// "__metadata__": {string: string}}, then the tensors' raw little-endian
// bytes (offsets relative to the end of the header). The JSON goes through
// nlohmann/json (Debian's nlohmann-json3-dev); the bytes are mapped, not
// read into memory, so a model of several GB costs no copy of the file.
//
// Dtypes: F32 and F64 are read as they are; BF16 and F16 (what models are
// published in) are widened to float32 exactly, and a NaN or Inf among them
// is refused, naming the tensor — a published checkpoint never holds one,
// and training from it would only spread it. Writing converts float32 to
// F32, BF16 or F16 with round-to-nearest-even (kernels/cast_math.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hpc::data {
class FileMapping;
}

namespace hpc::train {

struct SafetensorsEntry {
  std::string dtype;  // as the file spells it: "F32", "BF16", …
  Shape shape;
  uint64_t offset = 0, bytes = 0;  // within the data section
};

// One safetensors file, mapped. UserError ("safetensors file 'PATH': …") for a
// malformed, truncated or unreadable file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return meta_; }
  // The dtype of the file's floating tensors: "F32", "BF16", … or "mixed" ("" when it holds none).
  std::string dtype() const;

  // The tensor's values as float32 into out (shape.count() floats); UserError
  // for a dtype other than F32, F64, BF16, F16, or a NaN/Inf in a 16-bit one.
  void read_f32(const std::string& name, float* out) const;
  Tensor read_f32(const std::string& name) const;

 private:
  std::string path_;
  std::unique_ptr<data::FileMapping> map_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> meta_;
};

struct NamedArray {
  std::string name;
  Shape shape;
  const float* data = nullptr;  // float32, shape.count() values
};

// The safetensors name of a dtype (F32, BF16, F16, F64) and back ("" / F32 otherwise).
const char* safetensors_dtype(DType dtype);

// Writes `arrays` converted to `dtype` (F32, BF16 or F16) and `meta` to
// `path` through PATH.tmp-PID and a rename: the file is complete or absent.
// A full disk is an IoError (exit 74), another failure a UserError.
void write_safetensors(const std::string& path, const std::vector<NamedArray>& arrays,
                       const std::vector<std::pair<std::string, std::string>>& meta,
                       DType dtype = DType::F32);

// Bytes a file of `arrays` takes in `dtype` (header aside): for sharding.
uint64_t safetensors_data_bytes(const std::vector<NamedArray>& arrays, DType dtype);

}  // namespace hpc::train
