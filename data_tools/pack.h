// The pack pipeline every input format shares.
//
// A format reader (mnist-idx, cifar10-bin, npy, csv, synth, repack) turns
// its input into Arrays: N rows of one shape and dtype that can be read in
// order, a block at a time. write_packed() then streams them into a
// DatasetWriter (so an input larger than memory never has to fit), routing
// rows to /train or /val (a fixed-seed random --val-fraction, or a separate
// val input), checking class ids as they pass, and writing the attributes
// hpctrain reads: scale/mean/std for uint8 inputs (given, or 1/255 with the
// mean and std of the training pixels), num_classes for class ids (given, or
// the largest label + 1 over both splits).
//
// Readers check their input's structure themselves (magic, sizes, ragged
// rows, …) and name the file, and the row or line, in one UserError line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dataset_writer.h"

namespace hpc::data_tools {

struct Array {
  DType dtype = DType::U8;  // as written: U8 or F32 for x; I32 (class ids) or F32 (targets) for y
  Shape shape;              // N × …
  // Copies rows [first, first + n) to out, native byte order. Called with increasing `first`.
  std::function<void(int64_t first, int64_t n, void* out)> read;

  int64_t rows() const { return shape[0]; }
  int64_t row_bytes() const { return shape.count() / shape[0] * static_cast<int64_t>(dtype_size(dtype)); }
};

// An Array over values held in memory (row-major, shape.count() elements).
template <typename T>
Array memory_array(std::vector<T> values, DType dtype, Shape shape) {
  auto held = std::make_shared<std::vector<T>>(std::move(values));
  const int64_t per = shape.count() / shape[0];
  return Array{dtype, std::move(shape), [held, per](int64_t first, int64_t n, void* out) {
                 std::copy(held->begin() + first * per, held->begin() + (first + n) * per,
                           static_cast<T*>(out));
               }};
}

struct Split {
  Array x, y;
  std::string source;      // names the input in messages ("train.npy", "DIR/train-images-idx3-ubyte.gz")
  std::string y_source{};  // names y in label errors when it is another file ("labels.npy"); empty: source
  std::optional<double> scale{}, mean{},
      std{};  // uint8 x attributes of this split (repack); unset: the job's
  std::vector<double> channel_mean{},
      channel_std{};                   // per-channel mean/std (repack of image data), else empty
  std::vector<std::string> classes{};  // the y attribute `classes` (repack), else empty
};

struct PackJob {
  Split train;
  std::optional<Split> val;
  double val_fraction = 0;  // > 0: /val is this fraction of train (fixed seed; both keep input order)
  int64_t num_classes = 0;  // class ids must be below it; 0 = largest label + 1
  std::optional<double> scale, mean, std;  // uint8 x; unset: 1/255 and the train pixels' mean and std
  std::string train_name = "train";        // repack of a file that holds only /val writes it as "val"
};

// Writes the job through `w` and commits; prints one summary line.
void write_packed(DatasetWriter& w, const PackJob& job);

// Rows [0, n) split into (train rows, val rows) by a fixed-seed random choice
// of round(fraction·n) val rows (at least 1, at most n − 1). is_val[i] != 0
// marks val rows. Throws UserError when n < 2.
std::vector<char> val_rows(int64_t n, double fraction);

// "1.5", "0.001": a number as the user would write it.
std::string format_number(double v);

}  // namespace hpc::data_tools
