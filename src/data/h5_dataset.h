// H5Dataset: one split ("train" or "val") of an hpctrain HDF5 dataset file.
//
// Layout (docs/data.md "HDF5 layout"): /SPLIT/x is N × sample dims, float32 or
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
// NFS often refuse locks). Samples come from a SampleSource per dataset (see
// sample_source.h): memory-mapped when the dataset is contiguous, unfiltered
// and in native byte order (gather() is then plain memory reads, no HDF5
// call), else read with H5Dread under the process-wide HDF5 lock.
// mmap_advice() words the one line a user sees about the slower path.
// gather() is const and thread-safe: loader threads call it concurrently.
#pragma once

#include <hdf5.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"

namespace hpc::data {

class SampleSource;

struct OpenOptions {
  bool full_check = false;  // scan every input for NaN/Inf, not just the first 4096 samples
  bool allow_mmap = true;   // false: H5Dread even for mappable datasets (tests, benchmarks)
};

class H5Dataset : public Dataset {
 public:
  // Opens and validates `split` of `path`; throws UserError (one line) on any problem.
  H5Dataset(const std::string& path, const std::string& split, const OpenOptions& options);
  H5Dataset(const std::string& path, const std::string& split, bool full_check = false)
      : H5Dataset(path, split, OpenOptions{full_check, true}) {}
  ~H5Dataset() override;
  H5Dataset(H5Dataset&&) noexcept;
  H5Dataset& operator=(H5Dataset&&) noexcept;

  // True when `path` has a group /SPLIT (a half-written split is then reported
  // by the constructor rather than silently skipped). Throws UserError when
  // the file cannot be opened as HDF5.
  static bool has_split(const std::string& path, const std::string& split);

  const SplitInfo& info() const override { return info_; }
  const std::string& path() const override { return path_; }
  const std::string& split() const { return split_; }
  std::string describe() const override;
  // True when x and y are both memory-mapped.
  bool mapped() const override;
  // The datasets that are not mapped, with the reason, e.g.
  // "/train/x (chunked, filters: deflate)"; empty when mapped().
  std::vector<std::string> unmapped() const override;

  // Copies samples indices[0..n) (repeats allowed) into CPU tensors:
  //   x: F32 or F64, leading dim n, n × sample_shape.count() elements (uint8 is
  //      converted with scale/mean/std);
  //   y: classification: I32 with n elements; regression: F32 or F64 with
  //      n × k elements.
  // Indices must lie in [0, size) — they come from the sampler, not the user.
  void gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const override;

 private:
  // Converts x rows into out: row i is rows + indices[i]·stride (mapped), or
  // rows + i·stride when indices is null (rows read into a staging buffer).
  template <typename T>
  void gather_x(const std::byte* rows, const int64_t* indices, int64_t n, T* out) const;

  std::string path_, split_;
  SplitInfo info_;
  std::unique_ptr<SampleSource> x_, y_;
  // uint8 → value, per channel (one entry when the file has scalar
  // attributes). float32 (training): byte·gain + offset in float, which
  // vectorises (4× a table lookup) and is within 2 ulp of the exact value;
  // the same on every read path, so results never depend on the path.
  // float64 (gradient checks): a table of the exact values.
  std::vector<float> u8_gain_, u8_offset_;
  std::vector<std::array<double, 256>> u8_f64_;
};

// The uint8 attributes scale, mean and std of dataset `dset` (defaults 1,
// 0, 1), each std nonzero and every byte mapped to a finite float32 value;
// mean and std may also hold one value per channel (`channels` of them),
// which fills channel_mean / channel_std. UserError naming `what`.
void read_normalisation(hid_t dset, int64_t channels, const std::string& what, SplitInfo& info);

// The class labels /SPLIT/y (int32 [rows]) of an open file, checked as
// H5Dataset checks them: num_classes from the attributes or the largest
// label (see the file comment), every label in [0, num_classes); the
// classes without a sample are listed. Fills num_classes,
// missing_classes and num_classes_source of `info`.
std::unique_ptr<SampleSource> open_class_labels(hid_t file, const std::string& split, int64_t rows,
                                                bool allow_mmap, const std::string& file_what,
                                                SplitInfo& info);

// The one info line for datasets that are not memory-mapped ("" when all
// are): which ones and why, that H5Dread is slower, and the repack command.
std::string mmap_advice(const std::vector<const Dataset*>& datasets);

}  // namespace hpc::data
