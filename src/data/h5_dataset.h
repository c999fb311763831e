// H5Dataset: one split ("train" or "val") of an hpctrain HDF5 dataset file.
//
// Layout (DESIGN.md "HDF5 layout"): /SPLIT/x is N × sample dims, float32 or
// uint8; a uint8 x carries float attributes scale, mean, std (defaults 1, 0,
// 1) and a sample's value is (byte·scale − mean)/std. /SPLIT/y is N int32
// class ids (classification) or N (× k) float32 targets (regression).
//
// Everything a user can get wrong is checked when the split is opened, so a
// bad file fails in seconds with one line naming the file and dataset, never
// hours into a run: not HDF5, truncated, missing or mistyped datasets, length
// mismatch, no samples, labels outside [0, num_classes), NaN/Inf inputs
// (the first 4096 samples, or all with full_check).
//
// num_classes comes from the TRAIN split so that train and val agree: the
// `num_classes` attribute on /SPLIT/y if present, else the one on /train/y,
// else max(/train/y) + 1 (max of this split's labels when the file has no
// /train). Val labels are validated against that number.
//
// The file is opened read-only with HDF5 file locking off (Lustre, GPFS and
// NFS often refuse locks) and closed again before the constructor returns:
// samples are served from a SampleSource (see sample_source.h), and gather()
// touches no HDF5 state, so loader threads may call it concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace hpc::data {

class SampleSource;

struct SplitInfo {
  int64_t size = 0;              // samples N
  Shape sample_shape;            // x dims without N (e.g. 1x28x28)
  DType x_dtype = DType::F32;    // as stored: F32 or U8
  bool classification = true;    // y int32 class ids; else float targets
  int64_t num_classes = 0;       // classification only (0 for regression)
  Shape target_shape;            // regression: {k}; classification: {} (one id per sample)
  double scale = 1, mean = 0, std = 1;  // uint8 x: value = (byte·scale − mean)/std
};

class H5Dataset {
 public:
  // Opens and validates `split` of `path`; throws UserError (one line) on any problem.
  H5Dataset(const std::string& path, const std::string& split, bool full_check = false);
  ~H5Dataset();
  H5Dataset(H5Dataset&&) noexcept;
  H5Dataset& operator=(H5Dataset&&) noexcept;

  // True when `path` has a group /SPLIT (a half-written split is then reported
  // by the constructor rather than silently skipped). Throws UserError when
  // the file cannot be opened as HDF5.
  static bool has_split(const std::string& path, const std::string& split);

  const SplitInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  const std::string& split() const { return split_; }

  // Copies samples indices[0..n) into CPU tensors:
  //   x: F32 or F64, leading dim n, n × sample_shape.count() elements (uint8 is
  //      converted with scale/mean/std);
  //   y: classification: I32 with n elements; regression: F32 or F64 with
  //      n × k elements.
  // Indices must lie in [0, size) — they come from the sampler, not the user.
  void gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const;

 private:
  template <typename T>
  void gather_x(const int64_t* indices, int64_t n, T* out) const;

  std::string path_, split_;
  SplitInfo info_;
  std::unique_ptr<SampleSource> x_, y_;
  // uint8 → value for every byte, computed in double once, so the hot loop
  // is a table lookup and the result is the correctly rounded value.
  std::array<float, 256> u8_f32_{};
  std::array<double, 256> u8_f64_{};
};

}  // namespace hpc::data
