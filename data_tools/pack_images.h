// The decoding half of `pack --from image-folder` (image_folder.h): worker
// threads read and decode the files, a window ahead of the one thread that
// takes their results in file order; then each split is written.
//
// Two passes, so that an output's size is known when its dataset is made
// (HDF5 contiguous datasets, which hpctrain maps, cannot grow) without
// holding the images in memory and without decoding twice:
//  1. decode every file (the check that it is an image, and the pixel
//     statistics); what is to be stored — the decoded and resized pixels
//     (raw), or re-encoded JPEG bytes — goes to a spill file beside the
//     output, one per split; the files' own bytes (jpeg store, the default)
//     are not copied;
//  2. create the datasets at their final sizes and stream the spill, or
//     the files once more, into them.
// Results are taken in file order, so the output, the skip list and the
// first error do not depend on the number of threads.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "image_folder.h"

namespace hpc::data_tools {

class DatasetWriter;

struct PackPlan {
  bool store_raw = false;
  int64_t height = 0, width = 0;  // raw: the stored size (0: the images' own)
  int64_t max_side = 0;           // jpeg, re-encoding: longer side at most this (0: any)
  int quality = 0;                // jpeg: re-encode at this quality; 0 keeps the files' bytes
  bool skip_errors = false;
  int threads = 0;  // 0: every core
  std::string spill_prefix;
};

// A temporary file written once and read back once; removed when destroyed.
class Spill {
 public:
  explicit Spill(std::string path);
  ~Spill();
  Spill(const Spill&) = delete;
  Spill& operator=(const Spill&) = delete;
  void append(const uint8_t* data, size_t n);  // IoError on a full disk
  void rewind();                               // switches to reading from the start
  void read(uint8_t* out, size_t n);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

// One split as it was packed: labels, where each image's stored bytes are.
struct PackedSplit {
  std::string name;  // "train", "val"
  std::vector<int32_t> labels;
  std::vector<int64_t> offsets{0};  // jpeg: byte offsets (N + 1); raw: unused
  std::vector<std::string> paths;   // jpeg, the files' own bytes: the source of each image
  std::unique_ptr<Spill> spill;     // the stored bytes, when they are not the files'
  int64_t height = 0, width = 0;    // raw: the stored image size

  int64_t count() const { return static_cast<int64_t>(labels.size()); }
  int64_t stored_bytes() const;
  // Pass 2: creates and fills /NAME/x (raw) or /NAME/images and /NAME/offsets, and /NAME/y.
  void write(DatasetWriter& w, const PackPlan& plan) const;
};

struct PackResult {
  PackedSplit train, val;
  std::array<double, 3> mean{}, std{};  // of the training images' pixels, on the 0-1 scale
  int64_t height = 0, width = 0;        // raw: the stored size
  int64_t skipped = 0;
  double files_per_s = 0;
  int threads = 0;
};

// Pass 1 over `files` (is_val[i] != 0 sends file i to /val; empty: all train).
PackResult pack_images(const std::vector<ImageFile>& files, const std::vector<char>& is_val,
                       const PackPlan& plan);

}  // namespace hpc::data_tools
