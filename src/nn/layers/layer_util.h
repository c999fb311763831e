// What every layer needs besides its math: reading its spec arguments with
// one consistent error format, and scratch tensors that are allocated once.
//
// Every problem with a layer is reported as
//   layer 'conv(32,7)': kernel 7 larger than the 5x5 input (pad 0)
// i.e. the spec text the user wrote, then the problem, so a user can find
// the layer in a long spec.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/layer.h"

namespace hpc::nn {

// The spec text of parsed arguments: args.text, or rebuilt from the fields when empty.
std::string args_text(const LayerArgs& args);

[[noreturn]] void throw_layer_error(const std::string& text, const std::string& problem);

// Reads a layer's arguments by name. Positional arguments take the names in
// `names` in order, so conv(32,3,2) and conv(32,3,stride=2) mean the same.
// finish() rejects anything that was not read, which catches typos like pading=1.
class ArgReader {
 public:
  ArgReader(const LayerArgs& args, std::vector<std::string> names, bool takes_children = false);

  int64_t required_int(const std::string& name, int64_t min);
  int64_t int_or(const std::string& name, int64_t fallback, int64_t min);
  double real_or(const std::string& name, double fallback);
  bool flag_or(const std::string& name, bool fallback);
  void finish() const;

  const std::string& text() const { return text_; }
  [[noreturn]] void fail(const std::string& problem) const { throw_layer_error(text_, problem); }

 private:
  int64_t to_int(const std::string& name, double value, int64_t min) const;

  std::string text_;
  std::vector<std::string> names_;
  std::map<std::string, double> values_;
  std::set<std::string> used_;
};

// A view of `buf` shaped `shape`, reallocating buf only when it is too small
// (or of another dtype or device): a smaller batch (the last one of an epoch)
// reuses the memory, and steady-state training allocates nothing. Layers pass
// the device of the tensors they were given, so scratch lives where they do.
Tensor scratch(Tensor& buf, const Shape& shape, DType dtype, Device device = Device::CPU);

// The shortest text of a double that reads back to the same value (0.1 → "0.1"), for spec() texts.
std::string number_text(double v);

}  // namespace hpc::nn
