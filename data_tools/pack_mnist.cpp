// hpcdata pack --from mnist-idx: the 4 MNIST IDX files → train/val HDF5.
//
// Images stay uint8 (4× smaller than float, and the mmapped file is what
// every rank reads) with a channel dim, [N, 1, 28, 28] (NCHW), and carry the
// usual MNIST normalisation as attributes: value = (byte/255 − 0.1307)/0.3081.
// Labels become int32 with num_classes = 10. The output is checked before any
// input is read, and written through DatasetWriter (temp file + rename).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "dataset_writer.h"
#include "idx.h"

namespace hpc::data_tools {

namespace {

constexpr double MNIST_SCALE = 1.0 / 255.0;
constexpr double MNIST_MEAN = 0.1307;  // mean and std of the 60k MNIST training pixels in [0, 1]
constexpr double MNIST_STD = 0.3081;
constexpr int64_t NUM_CLASSES = 10;
constexpr uint64_t VAL_SPLIT_SEED = 0;  // fixed: the same files always give the same split

struct Split {
  IdxArray images;
  std::vector<int32_t> labels;
};

Split read_pair(const std::string& dir, const std::string& prefix) {
  const std::string img_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string lbl_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  Split s{read_idx_u8(img_path, 3), {}};
  IdxArray lbl = read_idx_u8(lbl_path, 1);
  if (s.images.dims[0] != lbl.dims[0])
    throw UserError(img_path + " holds " + std::to_string(s.images.dims[0]) + " images but " + lbl_path +
                    " holds " + std::to_string(lbl.dims[0]) + " labels");
  if (s.images.dims[0] == 0) throw UserError(img_path + " holds no images");
  if (s.images.dims[1] == 0 || s.images.dims[2] == 0) throw UserError(img_path + ": images of size 0");
  s.labels.reserve(lbl.data.size());
  for (size_t i = 0; i < lbl.data.size(); ++i) {
    if (lbl.data[i] >= NUM_CLASSES)
      throw UserError(lbl_path + ": label " + std::to_string(lbl.data[i]) + " at record " + std::to_string(i) +
                      " is not a digit 0-9");
    s.labels.push_back(lbl.data[i]);
  }
  return s;
}

std::string format_number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

int64_t image_bytes(const Split& s) { return s.images.dims[1] * s.images.dims[2]; }

// Moves a fixed-seed random fraction of `train` into a new split; both keep file order.
Split carve_val(Split& train, double fraction) {
  const int64_t n = train.images.dims[0];
  if (n < 2) throw UserError("--val-fraction needs at least 2 training images");
  const int64_t n_val = std::min(n - 1, std::max<int64_t>(1, std::llround(fraction * double(n))));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(VAL_SPLIT_SEED);
  std::vector<char> is_val(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n_val; ++i) {  // partial Fisher–Yates: the first n_val of a permutation
    std::swap(order[i], order[i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)))]);
    is_val[order[i]] = 1;
  }
  const int64_t row = image_bytes(train);
  Split val, kept;
  for (Split* s : {&val, &kept}) s->images.dims = train.images.dims;
  val.images.dims[0] = n_val;
  kept.images.dims[0] = n - n_val;
  for (int64_t i = 0; i < n; ++i) {
    Split& to = is_val[i] ? val : kept;
    const uint8_t* src = train.images.data.data() + i * row;
    to.images.data.insert(to.images.data.end(), src, src + row);
    to.labels.push_back(train.labels[i]);
  }
  train = std::move(kept);
  return val;
}

void write_split(DatasetWriter& w, const std::string& name, const Split& s) {
  const Shape x_shape{s.images.dims[0], 1, s.images.dims[1], s.images.dims[2]};
  const std::string x = "/" + name + "/x", y = "/" + name + "/y";
  w.write(x, s.images.data.data(), DType::U8, x_shape);
  w.set_attr(x, "scale", MNIST_SCALE);
  w.set_attr(x, "mean", MNIST_MEAN);
  w.set_attr(x, "std", MNIST_STD);
  w.write(y, s.labels.data(), DType::I32, Shape{static_cast<int64_t>(s.labels.size())});
  w.set_attr(y, "num_classes", NUM_CLASSES);
}

}  // namespace

void pack_mnist_idx(const PackMnistOptions& opt) {
  if (opt.val_fraction && !(*opt.val_fraction >= 0 && *opt.val_fraction < 1))
    throw UserError("--val-fraction must be in [0, 1), got " + format_number(*opt.val_fraction));
  std::error_code ec;
  if (!std::filesystem::is_directory(opt.dir, ec)) throw UserError(opt.dir + ": no such directory");

  DatasetWriter w(opt.out, opt.force);
  Split train = read_pair(opt.dir, "train");
  std::optional<Split> val;
  if (!opt.val_fraction) {
    val = read_pair(opt.dir, "t10k");
    if (image_bytes(*val) != image_bytes(train) || val->images.dims[1] != train.images.dims[1])
      throw UserError(opt.dir + ": t10k images are " + std::to_string(val->images.dims[1]) + "x" +
                      std::to_string(val->images.dims[2]) + " but train images are " +
                      std::to_string(train.images.dims[1]) + "x" + std::to_string(train.images.dims[2]));
  } else if (*opt.val_fraction > 0) {
    val = carve_val(train, *opt.val_fraction);
  }

  write_split(w, "train", train);
  if (val) write_split(w, "val", *val);
  w.commit();
  std::printf("wrote %s: train %lld x 1x%lldx%lld uint8", opt.out.c_str(),
              static_cast<long long>(train.images.dims[0]), static_cast<long long>(train.images.dims[1]),
              static_cast<long long>(train.images.dims[2]));
  if (val) std::printf(", val %lld", static_cast<long long>(val->images.dims[0]));
  std::printf(", %lld classes\n", static_cast<long long>(NUM_CLASSES));
}

}  // namespace hpc::data_tools
