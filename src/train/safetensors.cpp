// safetensors (see safetensors.h).
#include "train/safetensors.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/file_mapping.h"
#include "kernels/cast_math.h"

namespace hpc::train {

namespace {

using nlohmann::json;

size_t width_of(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F64") return 8;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

uint64_t file_size(const std::string& path, const std::string& what) {
  std::error_code ec;
  const uint64_t n = std::filesystem::file_size(path, ec);
  if (ec) throw UserError(what + ": cannot open it (" + ec.message() + ")");
  return n;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::string what = "safetensors file '" + path + "'";
  const uint64_t size = file_size(path, what);
  if (size < 8) throw UserError(what + ": shorter than its 8-byte header length");
  map_ = std::make_unique<data::FileMapping>(path, 0, size, what);
  const auto* bytes = reinterpret_cast<const unsigned char*>(map_->data());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > size - 8) throw UserError(what + ": header length " + std::to_string(n) + " beyond the file");
  data_start_ = 8 + n;
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::parse_error& e) {
    throw UserError(what + ": the header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw UserError(what + ": the header is not a JSON object");
  const uint64_t data_size = size - data_start_;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") {
      if (t.is_object())
        for (const auto& [k, v] : t.items())
          if (v.is_string()) meta_[k] = v.get<std::string>();
      continue;
    }
    const std::string& tensor = name;  // clang 14 cannot capture a structured binding
    const auto bad = [&](const std::string& why) {
      throw UserError(what + ": tensor '" + tensor + "' " + why);
    };
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      bad("lacks dtype, shape or data_offsets");
    const json &dtype = t["dtype"], &shape = t["shape"], &offsets = t["data_offsets"];
    if (!dtype.is_string() || !shape.is_array() || !offsets.is_array() || offsets.size() != 2)
      bad("has a malformed dtype, shape or data_offsets");
    SafetensorsEntry e;
    e.dtype = dtype.get<std::string>();
    std::vector<int64_t> dims;
    for (const json& d : shape) {
      if (!d.is_number_unsigned()) bad("has a dimension that is not a whole number");
      dims.push_back(d.get<int64_t>());
    }
    e.shape = Shape(dims);
    for (const json& o : offsets)
      if (!o.is_number_unsigned()) bad("has data_offsets that are not whole numbers");
    const uint64_t b = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const size_t width = width_of(e.dtype);
    if (width == 0) bad("has the unknown dtype " + e.dtype);
    if (end < b || end > data_size || end - b != uint64_t(e.shape.count()) * width)
      bad("has a byte range that does not fit its shape or the file");
    e.offset = b;
    e.bytes = end - b;
    entries_.emplace(name, std::move(e));
  }
}

SafetensorsFile::~SafetensorsFile() = default;

std::string SafetensorsFile::dtype() const {
  std::string d;
  for (const auto& [name, e] : entries_) {
    if (e.dtype != "F32" && e.dtype != "F64" && e.dtype != "BF16" && e.dtype != "F16") continue;
    if (!d.empty() && d != e.dtype) return "mixed";
    d = e.dtype;
  }
  return d;
}

void SafetensorsFile::read_f32(const std::string& name, float* out) const {
  const auto it = entries_.find(name);
  HPC_ASSERT(it != entries_.end(), "read_f32: no tensor " + name);
  const SafetensorsEntry& e = it->second;
  const auto* src = reinterpret_cast<const unsigned char*>(map_->data()) + data_start_ + e.offset;
  const int64_t n = e.shape.count();
  const std::string what = "safetensors file '" + path_ + "': tensor '" + name + "'";
  if (e.dtype == "F32") {
    std::memcpy(out, src, size_t(n) * 4);
  } else if (e.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + i * 8, 8);
      out[i] = static_cast<float>(v);
    }
  } else if (e.dtype == "BF16" || e.dtype == "F16") {
    const bool bf = e.dtype == "BF16";
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + i * 2, 2);
      const float v = bf ? float(kernels::Bf16::from_bits(bits)) : float(kernels::Half::from_bits(bits));
      if (!std::isfinite(v))
        throw UserError(what + " holds " + (std::isnan(v) ? "NaN" : "Inf") + " at element " +
                        std::to_string(i) + " (" + e.dtype + "): the checkpoint is damaged");
      out[i] = v;
    }
  } else {
    throw UserError(what + " is " + e.dtype + "; hpctrain reads F32, F64, BF16 and F16 weights");
  }
}

Tensor SafetensorsFile::read_f32(const std::string& name) const {
  const auto it = entries_.find(name);
  HPC_ASSERT(it != entries_.end(), "read_f32: no tensor " + name);
  Tensor t(it->second.shape, DType::F32);
  read_f32(name, t.data<float>());
  return t;
}

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    default:
      return "";
  }
}

uint64_t safetensors_data_bytes(const std::vector<NamedArray>& arrays, DType dtype) {
  uint64_t n = 0;
  for (const NamedArray& a : arrays) n += uint64_t(a.shape.count()) * dtype_size(dtype);
  return n;
}

void write_safetensors(const std::string& path, const std::vector<NamedArray>& arrays,
                       const std::vector<std::pair<std::string, std::string>>& meta, DType dtype) {
  HPC_ASSERT(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "write_safetensors: dtype");
  const size_t width = dtype_size(dtype);
  // nlohmann's ordered_json keeps the tensors in the file's (the model's) order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  for (const auto& [k, v] : meta) m[k] = v;
  header["__metadata__"] = m;
  uint64_t offset = 0;
  for (const NamedArray& a : arrays) {
    const uint64_t bytes = uint64_t(a.shape.count()) * width;
    header[a.name] = {{"dtype", safetensors_dtype(dtype)},
                      {"shape", a.shape.dims()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  auto fail = [&](int err) {
    std::filesystem::remove(tmp);
    if (err == ENOSPC || err == EDQUOT) throw IoError("cannot write '" + path + "': " + std::strerror(err));
    throw UserError("cannot write '" + path + "'" + (err ? std::string(": ") + std::strerror(err) : ""));
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(errno);
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  std::vector<uint16_t> half;
  for (const NamedArray& a : arrays) {
    if (!ok) break;
    const size_t n = size_t(a.shape.count());
    if (dtype == DType::F32) {
      ok = std::fwrite(a.data, 4, n, f) == n;
      continue;
    }
    half.resize(n);
    for (size_t i = 0; i < n; ++i)
      half[i] = dtype == DType::BF16 ? kernels::Bf16(a.data[i]).bits : kernels::Half(a.data[i]).bits;
    ok = std::fwrite(half.data(), 2, n, f) == n;
  }
  const int write_err = ok ? 0 : errno;
  if (std::fflush(f) != 0 && ok) ok = false;
  const int flush_err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) ok = false;
  if (!ok) fail(write_err ? write_err : flush_err ? flush_err : errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(errno);
}

}  // namespace hpc::train
