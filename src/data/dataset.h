// Dataset: what the trainer, the loader and the start-up report need from
// one split of a data file, whatever kind of data it holds.
//
// Three kinds implement it: H5Dataset (/SPLIT/x and /SPLIT/y: images, feature
// rows, regression targets), ImageDataset (/SPLIT/images: encoded JPEG or
// PNG files, decoded by the loader) and TokenDataset (/SPLIT/tokens: a token
// stream cut into windows for a language model). Both describe themselves with a
// SplitInfo and copy samples with gather(); the sampler only ever sees
// sample indices in [0, info().size), so sharding, shuffling and exact resume
// are the same code for both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hpc::data {

struct SplitInfo {
  int64_t size = 0;            // samples N (token data: windows)
  Shape sample_shape;          // x dims without N (e.g. 1x28x28; token data: {T})
  DType x_dtype = DType::F32;  // as stored: F32 or U8 (token data: U16 or I32 ids)
  bool classification = true;  // y int32 class ids; else float targets
  int64_t num_classes = 0;     // classification only (0 for regression; token data: vocabulary)
  Shape target_shape;          // regression: {k}; classification: {} (one id per sample); tokens: {T}
  double scale = 1, mean = 0, std = 1;  // uint8 x: value = (byte·scale − mean)/std
  // Per-channel mean and std (C values, channel = first sample dimension)
  // where the file gives them, as image folders' files do; they then
  // replace mean and std. Empty otherwise.
  std::vector<double> channel_mean, channel_std;
  // Classification: the classes in [0, num_classes) without a single sample,
  // and how num_classes was chosen ("max label of /train/y + 1", an attribute).
  std::vector<int64_t> missing_classes;
  std::string num_classes_source;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual const SplitInfo& info() const = 0;
  virtual const std::string& path() const = 0;
  // One line for the start-up report: "60000 train samples of 1x28x28 (uint8), 10 classes",
  // "1000000 train tokens (uint16) = 15624 windows of 64 + 1, vocabulary 256".
  virtual std::string describe() const = 0;
  // True when every dataset behind the split is memory-mapped.
  virtual bool mapped() const = 0;
  // The datasets that are not mapped, with the reason ("/train/x (chunked, filters: deflate)").
  virtual std::vector<std::string> unmapped() const = 0;
  // Copies samples indices[0..n) into CPU tensors x (F32 or F64, n × sample_shape)
  // and y (I32 ids or float targets, n × target_shape). Thread-safe.
  virtual void gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const = 0;
};

}  // namespace hpc::data
