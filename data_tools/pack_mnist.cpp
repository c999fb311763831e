// hpcdata pack --from mnist-idx: the 4 MNIST IDX files → train/val HDF5.
//
// Images stay uint8 (4× smaller than float, and the mmapped file is what
// every rank reads) with a channel dim, [N, 1, 28, 28] (NCHW), and carry the
// usual MNIST normalisation as attributes: value = (byte/255 − 0.1307)/0.3081.
// Labels become int32 with num_classes = 10.
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "idx.h"

namespace hpc::data_tools {

namespace {

constexpr double MNIST_SCALE = 1.0 / 255.0;
constexpr double MNIST_MEAN = 0.1307;  // mean and std of the 60k MNIST training pixels in [0, 1]
constexpr double MNIST_STD = 0.3081;
constexpr int64_t NUM_CLASSES = 10;

Split read_pair(const std::string& dir, const std::string& prefix) {
  const std::string img_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string lbl_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx_u8(img_path, 3);
  IdxArray lbl = read_idx_u8(lbl_path, 1);
  if (images.dims[0] != lbl.dims[0])
    throw UserError(img_path + " holds " + std::to_string(images.dims[0]) + " images but " + lbl_path +
                    " holds " + std::to_string(lbl.dims[0]) + " labels");
  if (images.dims[0] == 0) throw UserError(img_path + " holds no images");
  if (images.dims[1] == 0 || images.dims[2] == 0) throw UserError(img_path + ": images of size 0");
  std::vector<int32_t> labels;
  labels.reserve(lbl.data.size());
  for (size_t i = 0; i < lbl.data.size(); ++i) {
    if (lbl.data[i] >= NUM_CLASSES)
      throw UserError(lbl_path + ": label " + std::to_string(lbl.data[i]) + " at record " +
                      std::to_string(i) + " is not a digit 0-9");
    labels.push_back(lbl.data[i]);
  }
  const int64_t n = images.dims[0];
  return Split{memory_array(std::move(images.data), DType::U8, Shape{n, 1, images.dims[1], images.dims[2]}),
               memory_array(std::move(labels), DType::I32, Shape{n}), img_path};
}

}  // namespace

PackJob read_mnist_idx(const PackOptions& opt) {
  if (opt.inputs.size() != 1) throw UserError("pack --from mnist-idx takes one DIR (see hpcdata --help)");
  if (!opt.val_inputs.empty())
    throw UserError(
        "pack --from mnist-idx: --val does not apply (DIR's t10k files are the validation set; "
        "--val-fraction carves one from train instead)");
  const std::string& dir = opt.inputs[0];
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw UserError(dir + ": no such directory");
  PackJob job;
  job.train = read_pair(dir, "train");
  if (!opt.val_fraction)
    job.val = read_pair(dir, "t10k");
  else
    job.val_fraction = *opt.val_fraction;
  job.num_classes = NUM_CLASSES;
  job.scale = MNIST_SCALE;
  job.mean = MNIST_MEAN;
  job.std = MNIST_STD;
  return job;
}

void pack(const PackOptions& opt) {
  if (opt.val_fraction && !(*opt.val_fraction >= 0 && *opt.val_fraction < 1))
    throw UserError("--val-fraction must be in [0, 1), got " + format_number(*opt.val_fraction));
  if (opt.val_fraction && !opt.val_inputs.empty())
    throw UserError("pack: give --val or --val-fraction, not both");
  if (opt.inputs.empty())
    throw UserError("pack --from " + opt.from + " needs its input (see hpcdata --help)");
  DatasetWriter w(opt.out, opt.force);  // the output is checked before any input is read
  if (opt.from == "text") return pack_text(w, opt);
  if (opt.from == "tokens-bin") return pack_tokens_bin(w, opt);
  if (opt.from == "image-folder") return pack_image_folder(w, opt);
  PackJob job;
  if (opt.from == "mnist-idx")
    job = read_mnist_idx(opt);
  else if (opt.from == "cifar10-bin")
    job = read_cifar10_bin(opt);
  else if (opt.from == "npy")
    job = read_npy(opt);
  else if (opt.from == "csv")
    job = read_csv(opt);
  else
    throw UserError("pack: unknown --from " + opt.from + " (mnist-idx, cifar10-bin, npy, csv or text)");
  write_packed(w, job);
}

}  // namespace hpc::data_tools
