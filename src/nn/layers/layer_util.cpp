// Argument reading and scratch memory for layers (see layer_util.h).
#include "nn/layers/layer_util.h"

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace hpc::nn {

std::string number_text(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // shortest text that reads back exactly
  return std::string(buf, end);
}

std::string args_text(const LayerArgs& args) {
  if (!args.text.empty()) return args.text;
  std::string s = args.name;
  std::vector<std::string> parts;
  for (double v : args.positional) parts.push_back(number_text(v));
  for (const auto& [k, v] : args.named) parts.push_back(k + "=" + number_text(v));
  for (const LayerArgs& c : args.children) parts.push_back(args_text(c));
  if (parts.empty()) return s;
  s += "(";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? (args.children.empty() ? "," : " ") : "") + parts[i];
  return s + ")";
}

void throw_layer_error(const std::string& text, const std::string& problem) {
  throw UserError("layer '" + text + "': " + problem);
}

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}
}  // namespace

ArgReader::ArgReader(const LayerArgs& args, std::vector<std::string> names, bool takes_children)
    : text_(args_text(args)), names_(std::move(names)) {
  if (!takes_children && !args.children.empty()) fail(args.name + " takes numbers, not nested layers");
  if (args.positional.size() > names_.size())
    fail(names_.empty() ? args.name + " takes no arguments"
                        : args.name + " takes at most " + std::to_string(names_.size()) + " arguments (" +
                              join(names_) + "), got " + std::to_string(args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) values_[names_[i]] = args.positional[i];
  for (const auto& [key, value] : args.named) {
    if (values_.count(key)) fail("argument '" + key + "' given twice");
    values_[key] = value;
  }
}

int64_t ArgReader::to_int(const std::string& name, double value, int64_t min) const {
  if (!std::isfinite(value) || value != std::floor(value))
    fail(name + " must be a whole number, got " + number_text(value));
  if (value < double(min))
    fail(name + " must be at least " + std::to_string(min) + ", got " + number_text(value));
  // 2^24: far above any real width, kernel or vocabulary, and small enough that a layer's
  // buffers (BatchNorm allocates its statistics in build) and shape products stay sane.
  if (value > double(1 << 24)) fail(name + " is too large: " + number_text(value) + " (at most 16777216)");
  return static_cast<int64_t>(value);
}

int64_t ArgReader::required_int(const std::string& name, int64_t min) {
  used_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) fail("missing argument '" + name + "' (arguments: " + join(names_) + ")");
  return to_int(name, it->second, min);
}

int64_t ArgReader::int_or(const std::string& name, int64_t fallback, int64_t min) {
  used_.insert(name);
  auto it = values_.find(name);
  return it == values_.end() ? fallback : to_int(name, it->second, min);
}

double ArgReader::real_or(const std::string& name, double fallback) {
  used_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (!std::isfinite(it->second)) fail(name + " must be a finite number");
  return it->second;
}

bool ArgReader::flag_or(const std::string& name, bool fallback) {
  used_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (it->second != 0 && it->second != 1) fail(name + " must be 0 or 1, got " + number_text(it->second));
  return it->second == 1;
}

void ArgReader::finish() const {
  for (const auto& [key, value] : values_)
    if (!used_.count(key))
      fail("unknown argument '" + key + "'" + (names_.empty() ? "" : " (arguments: " + join(names_) + ")"));
}

Tensor scratch(Tensor& buf, const Shape& shape, DType dtype, Device device) {
  if (!buf.defined() || buf.dtype() != dtype || buf.device() != device || buf.count() < shape.count())
    buf = Tensor(shape, dtype, device);
  return buf.slice(0, shape);
}

}  // namespace hpc::nn
