// ImageDataset: open-time checks of an image split, and decoding gathers.
//
// The constructor checks in the order a user would fix things (file,
// datasets, offsets, labels, images), each failure one UserError line
// "data file 'PATH': /SPLIT/NAME …", like H5Dataset.
#include "data/image_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/fault.h"
#include "data/h5_handle.h"
#include "data/sample_source.h"

namespace hpc::data {

namespace {

constexpr int64_t QUICK_CHECK_IMAGES = 4096;  // headers read at open (all with data.check full)
constexpr int64_t DEFAULT_SIZE = 224;         // a file without a size attribute

bool link_exists(hid_t file, const std::string& name) {
  size_t pos = 0;  // H5Lexists fails when a parent is missing, so walk down
  while (pos != std::string::npos) {
    pos = name.find('/', pos + 1);
    if (H5Lexists(file, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

H5Handle open_named(hid_t file, const std::string& name, const std::string& file_what) {
  if (!link_exists(file, name))
    throw UserError(file_what + ": " + name + " is missing (an image split has images, offsets and y)");
  H5Handle dapl = h5_dataset_access(file_what + ": " + name);
  return H5Handle::dataset(
      h5_check(H5Dopen2(file, name.c_str(), dapl.id()), file_what + ": " + name + " cannot be opened"));
}

// Rank-1 integer dataset of `bytes`-byte elements (signed or not): its length; else UserError.
int64_t vector_length(hid_t dset, size_t bytes, bool is_signed, const std::string& what, const char* want) {
  H5Handle t = H5Handle::type(h5_check(H5Dget_type(dset), what + ": cannot read its type"));
  H5Handle s = H5Handle::space(h5_check(H5Dget_space(dset), what + ": cannot read its shape"));
  const bool ok_type = H5Tget_class(t.id()) == H5T_INTEGER && H5Tget_size(t.id()) == bytes &&
                       (H5Tget_sign(t.id()) == H5T_SGN_2) == is_signed;
  if (!ok_type || H5Sget_simple_extent_ndims(s.id()) != 1)
    throw UserError(what + " is " + h5_type_name(t.id()) + " of rank " +
                    std::to_string(H5Sget_simple_extent_ndims(s.id())) + "; it must be " + want);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(s.id(), &n, nullptr);
  return static_cast<int64_t>(n);
}

std::optional<int64_t> int_attr(hid_t obj, const char* name, const std::string& what) {
  if (H5Aexists(obj, name) <= 0) return std::nullopt;
  H5Handle a = H5Handle::attr(h5_check(H5Aopen(obj, name, H5P_DEFAULT), what + ": attribute " + name));
  double v = 0;
  h5_check(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v), what + ": attribute " + name + " cannot be read");
  if (!(v >= 1 && v <= 16384 && v == std::floor(v)))
    throw UserError(what + ": attribute '" + name + "' must be an image side of 1 to 16384 pixels");
  return static_cast<int64_t>(v);
}

}  // namespace

bool ImageDataset::is_image_file(const std::string& path) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle file = h5_open_read_only(path);
  return link_exists(file.id(), "/train/images");
}

bool ImageDataset::has_split(const std::string& path, const std::string& split) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle file = h5_open_read_only(path);
  return link_exists(file.id(), "/" + split);
}

ImageDataset::ImageDataset(const std::string& path, const std::string& split, int64_t size,
                           const OpenOptions& options)
    : path_(path), split_(split) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  const std::string file_what = "data file '" + path + "'";
  const std::string iname = "/" + split + "/images", oname = "/" + split + "/offsets";
  const std::string iwhat = file_what + ": " + iname, owhat = file_what + ": " + oname;

  H5Handle file = h5_open_read_only(path);
  H5Handle images = open_named(file.id(), iname, file_what);
  H5Handle offsets = open_named(file.id(), oname, file_what);
  bytes_ = vector_length(images.id(), 1, false, iwhat, "uint8 [bytes]");
  const int64_t entries = vector_length(offsets.id(), 8, true, owhat, "int64 [images + 1]");
  if (entries < 2)
    throw UserError(owhat + " has " + std::to_string(entries) + " entries: the split has no images");
  info_.size = entries - 1;

  // The offsets index, whole: 8 bytes per image, and every later read relies on it.
  std::unique_ptr<SampleSource> index =
      open_source(file.id(), SourceRequest{oname, H5T_NATIVE_INT64, entries, 8, options.allow_mmap, owhat});
  offsets_.resize(static_cast<size_t>(entries));
  index->read_range(0, entries, reinterpret_cast<std::byte*>(offsets_.data()));
  if (offsets_[0] < 0 || offsets_[0] > bytes_)
    throw UserError(owhat + " is damaged: image 0 starts at byte " + std::to_string(offsets_[0]) + " of " +
                    std::to_string(bytes_));
  for (int64_t i = 0; i < info_.size; ++i) {
    const int64_t b = offsets_[static_cast<size_t>(i)], e = offsets_[static_cast<size_t>(i + 1)];
    if (e <= b || e > bytes_)
      throw UserError(owhat + " is damaged at sample " + std::to_string(i) + ": its bytes [" +
                      std::to_string(b) + ", " + std::to_string(e) + ") are " +
                      (e <= b ? "empty or reversed"
                              : "past the end of " + iname + " (" + std::to_string(bytes_) + " bytes)"));
  }
  images_ =
      open_source(file.id(), SourceRequest{iname, H5T_NATIVE_UINT8, bytes_, 1, options.allow_mmap, iwhat});

  read_normalisation(images.id(), 3, iwhat, info_);
  if (info_.channel_mean.empty()) {  // one value for all three channels
    info_.channel_mean.assign(3, info_.mean);
    info_.channel_std.assign(3, info_.std);
  }
  info_.scale = 1.0 / 255;  // the mean and std are of pixels on the 0-1 scale
  const int64_t side = size > 0 ? size : int_attr(images.id(), "size", iwhat).value_or(DEFAULT_SIZE);
  info_.sample_shape = Shape{3, side, side};
  info_.x_dtype = DType::U8;
  info_.classification = true;
  y_ = open_class_labels(file.id(), split, info_.size, options.allow_mmap, file_what, info_);
  {
    H5Handle y = H5Handle::dataset(H5Dopen2(file.id(), ("/" + split + "/y").c_str(), H5P_DEFAULT));
    if (y.valid()) classes_ = h5_string_list_attr(y.id(), "classes");
  }
  pipeline_ = std::make_unique<ImagePipeline>(
      side, std::array<double, 3>{info_.channel_mean[0], info_.channel_mean[1], info_.channel_mean[2]},
      std::array<double, 3>{info_.channel_std[0], info_.channel_std[1], info_.channel_std[2]});

  // Headers of the first images (all with data.check full): a shifted index or garbage bytes fail now.
  const int64_t scan = options.full_check ? info_.size : std::min(info_.size, QUICK_CHECK_IMAGES);
  std::vector<uint8_t> buf;
  for (int64_t i = 0; i < scan; ++i) {
    size_t n = 0;
    const uint8_t* p = sample_bytes(i, buf, n);
    try {
      read_header(p, n);
    } catch (const ImageError& e) {
      throw UserError(sample_what(i) + " is not a readable image (" + e.what() +
                      "): the file or its offsets index is damaged");
    }
  }
}

ImageDataset::~ImageDataset() = default;

std::string ImageDataset::sample_what(int64_t i) const {
  return "data file '" + path_ + "': /" + split_ + "/images sample " + std::to_string(i) + " (bytes " +
         std::to_string(offsets_[static_cast<size_t>(i)]) + " to " +
         std::to_string(offsets_[static_cast<size_t>(i + 1)]) + ")";
}

std::string ImageDataset::describe() const {
  char mib[32];
  if (bytes_ < (1 << 20))
    std::snprintf(mib, sizeof mib, "%.1f kB", double(bytes_) / 1e3);
  else
    std::snprintf(mib, sizeof mib, "%.1f MiB", double(bytes_) / 1048576.0);
  return std::to_string(info_.size) + " " + split_ + " images (" + mib + " encoded) decoded to " +
         info_.sample_shape.str() + ", " + std::to_string(info_.num_classes) + " classes";
}

bool ImageDataset::mapped() const { return images_->data() && y_->data(); }

std::vector<std::string> ImageDataset::unmapped() const {
  std::vector<std::string> out;
  for (const auto& [name, src] : {std::pair{"images", images_.get()}, std::pair{"y", y_.get()}})
    if (!src->data()) out.push_back("/" + split_ + "/" + name + " (" + src->why_not_mapped() + ")");
  return out;
}

const uint8_t* ImageDataset::sample_bytes(int64_t i, std::vector<uint8_t>& buf, size_t& n) const {
  const int64_t b = offsets_[static_cast<size_t>(i)], e = offsets_[static_cast<size_t>(i + 1)];
  n = static_cast<size_t>(e - b);
  if (images_->data()) return reinterpret_cast<const uint8_t*>(images_->data()) + b;
  buf.resize(n);
  images_->read_range(b, e - b, reinterpret_cast<std::byte*>(buf.data()));
  return buf.data();
}

void ImageDataset::gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const {
  gather_with(indices, n, x, y, nullptr, 0, 0);
}

void ImageDataset::gather_augmented(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y,
                                    const Augment& augment, uint64_t seed, int64_t epoch) const {
  gather_with(indices, n, x, y, &augment, seed, epoch);
}

void ImageDataset::gather_with(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y,
                               const Augment* augment, uint64_t seed, int64_t epoch) const {
  const int64_t per = info_.sample_shape.count();
  HPC_ASSERT(x.device() == Device::CPU && y.device() == Device::CPU,
             "ImageDataset::gather into device tensors");
  HPC_ASSERT(x.dtype() == DType::F32 && x.count() == n * per,
             "ImageDataset::gather: x is " + x.shape().str());
  HPC_ASSERT(y.dtype() == DType::I32 && y.count() == n, "ImageDataset::gather: y is " + y.shape().str());
  if (const int err = fault_at(FaultPoint::DataRead))  // test-only: a failed read of the images
    throw_read_error("data file '" + path_ + "': /" + split_ + "/images", row_span(indices, n), err);
  thread_local ImageScratch scratch;
  thread_local std::vector<uint8_t> buf;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices[k];
    HPC_ASSERT(i >= 0 && i < info_.size, "ImageDataset::gather: index " + std::to_string(i));
    size_t bytes = 0;
    const uint8_t* p = sample_bytes(i, buf, bytes);
    try {
      pipeline_->run(p, bytes, augment, SampleKey{seed, epoch, i}, x.data<float>() + k * per, scratch);
    } catch (const ImageError& e) {
      throw UserError(sample_what(i) + " cannot be decoded: " + e.what());
    }
  }
  if (y_->data()) {
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(y.data<int32_t>() + k, y_->data() + indices[k] * 4, sizeof(int32_t));
  } else {
    y_->read_rows(indices, n, static_cast<std::byte*>(y.raw()));
  }
}

}  // namespace hpc::data
