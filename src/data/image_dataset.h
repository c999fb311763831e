// ImageDataset: one split of a file written by `hpcdata pack --from
// image-folder --store jpeg`: the image files' bytes, decoded in the
// loader's threads.
//
// Layout (docs/data.md "Image folders"):
//   /SPLIT/images   uint8 [B]: the encoded files (JPEG or PNG) one after the
//                   other; attributes mean and std (3 values: the training
//                   pixels' per-channel statistics on the 0-1 scale) and
//                   size (the side samples are decoded to by default)
//   /SPLIT/offsets  int64 [N + 1]: image i is bytes [offsets[i], offsets[i+1])
//   /SPLIT/y        int32 [N] class ids; attributes num_classes and classes
//                   (the class folders' names, in class-id order)
// All three are contiguous and mapped like every hpcdata output, so a
// sample's bytes are a memory read.
//
// A sample is 3 × S × S float32 (S: random_resized_crop's size when the
// run asks for one, else the file's `size`), made by ImagePipeline:
// gather() gives the validation view (resize, centre crop), gather_augmented()
// the training one for an epoch. Both are thread-safe and a function of the
// bytes, the index, the seed and the epoch only.
//
// Checked at open, each one line naming the file: the datasets' types and
// shapes, the offsets index (increasing, inside /SPLIT/images: a damaged
// one names the sample), the labels as H5Dataset checks them, and the
// first 4096 images' headers (every image's with data.check full). A
// decode error later names the sample and its byte range.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/dataset.h"
#include "data/h5_dataset.h"
#include "data/image_pipeline.h"

namespace hpc::data {

class SampleSource;

class ImageDataset : public Dataset {
 public:
  // `size` 0: the file's size attribute.
  ImageDataset(const std::string& path, const std::string& split, int64_t size, const OpenOptions& options);
  ~ImageDataset() override;

  // True when `path` holds /train/images (an image file, not /train/x); UserError when not HDF5.
  static bool is_image_file(const std::string& path);
  static bool has_split(const std::string& path, const std::string& split);

  const SplitInfo& info() const override { return info_; }
  const std::string& path() const override { return path_; }
  const std::string& split() const { return split_; }
  std::string describe() const override;
  bool mapped() const override;
  std::vector<std::string> unmapped() const override;
  // The validation view of samples indices[0..n) into x (F32 [n, 3, S, S]) and y (I32 [n]).
  void gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const override;
  // The training view: `augment`'s crop, flip and jitter for (seed, epoch, index).
  void gather_augmented(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y,
                        const Augment& augment, uint64_t seed, int64_t epoch) const;

  int64_t stored_bytes() const { return bytes_; }
  const std::vector<std::string>& class_names() const { return classes_; }

 private:
  void gather_with(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y,
                   const Augment* augment, uint64_t seed, int64_t epoch) const;
  // The bytes of sample i (a view into the mapping, or read into `buf`).
  const uint8_t* sample_bytes(int64_t i, std::vector<uint8_t>& buf, size_t& n) const;
  std::string sample_what(int64_t i) const;

  std::string path_, split_;
  SplitInfo info_;
  int64_t bytes_ = 0;
  std::vector<int64_t> offsets_;  // N + 1 (validated at open; 8 bytes per image)
  std::unique_ptr<SampleSource> images_, y_;
  std::unique_ptr<ImagePipeline> pipeline_;
  std::vector<std::string> classes_;
};

}  // namespace hpc::data
