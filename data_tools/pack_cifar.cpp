// hpcdata pack --from cifar10-bin: the CIFAR-10 "binary version" → HDF5.
//
// Each file is a sequence of 3073-byte records: one label byte (0-9), then
// 1024 red, 1024 green and 1024 blue bytes of a 32×32 image, row-major: the
// NCHW layout hpctrain wants, so images stay uint8 [N, 3, 32, 32] as they are.
// Given a directory (cifar-10-batches-bin), train is data_batch_1…5.bin and
// val is test_batch.bin; given files, they are train and --val names val.
// Files may be gzipped. scale = 1/255; mean and std are the training pixels'.
#include <algorithm>
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "idx.h"

namespace hpc::data_tools {

namespace {

constexpr int64_t IMAGE_BYTES = 3 * 32 * 32;
constexpr int64_t RECORD_BYTES = 1 + IMAGE_BYTES;
constexpr int64_t NUM_CLASSES = 10;

Split read_files(const std::vector<std::string>& files) {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  for (const std::string& f : files) {
    const std::vector<uint8_t> bytes = read_whole_file(f);
    const int64_t size = static_cast<int64_t>(bytes.size());
    if (size == 0 || size % RECORD_BYTES != 0)
      throw UserError(f + ": " + std::to_string(size) +
                      " bytes is not a whole number of 3073-byte CIFAR-10 records " +
                      "(truncated, or not the binary version)");
    for (int64_t r = 0; r < size / RECORD_BYTES; ++r) {
      const uint8_t* rec = bytes.data() + r * RECORD_BYTES;
      if (rec[0] >= NUM_CLASSES)
        throw UserError(
            f + ": label " + std::to_string(rec[0]) + " at record " + std::to_string(r) +
            " is not a CIFAR-10 class 0-9 (CIFAR-100 files have 2 label bytes and are not supported)");
      labels.push_back(rec[0]);
      images.insert(images.end(), rec + 1, rec + RECORD_BYTES);
    }
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  const std::string source =
      files.size() == 1 ? files[0] : files[0] + " (and " + std::to_string(files.size() - 1) + " more)";
  return Split{memory_array(std::move(images), DType::U8, Shape{n, 3, 32, 32}),
               memory_array(std::move(labels), DType::I32, Shape{n}), source};
}

}  // namespace

PackJob read_cifar10_bin(const PackOptions& opt) {
  namespace fs = std::filesystem;
  std::vector<std::string> train = opt.inputs, val = opt.val_inputs;
  std::error_code ec;
  if (train.size() == 1 && fs::is_directory(train[0], ec)) {
    const std::string dir = train[0];
    train.clear();
    for (int b = 1; b <= 5; ++b)
      for (const char* ext : {"", ".gz"}) {
        const fs::path p = fs::path(dir) / ("data_batch_" + std::to_string(b) + ".bin" + ext);
        if (fs::is_regular_file(p, ec)) {
          train.push_back(p.string());
          break;
        }
      }
    if (train.empty())
      throw UserError(dir +
                      ": no data_batch_1.bin … data_batch_5.bin (the CIFAR-10 binary version, "
                      "cifar-10-batches-bin)");
    for (const char* ext : {"", ".gz"}) {
      const fs::path p = fs::path(dir) / (std::string("test_batch.bin") + ext);
      if (val.empty() && !opt.val_fraction && fs::is_regular_file(p, ec)) val.push_back(p.string());
    }
  }
  PackJob job;
  job.train = read_files(train);
  if (!val.empty()) job.val = read_files(val);
  job.val_fraction = opt.val_fraction.value_or(0);
  job.num_classes = NUM_CLASSES;
  job.scale = 1.0 / 255;
  return job;
}

}  // namespace hpc::data_tools
