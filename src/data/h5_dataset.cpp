// H5Dataset: open-time validation of one split, and gather().
//
// The constructor is a straight list of checks in the order a user would fix
// them (file, datasets, types, shapes, attributes, values); each failure is
// one UserError line "data file 'PATH': /SPLIT/NAME …".
#include "data/h5_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "backend/dispatch.h"
#include "core/error.h"
#include "core/fault.h"
#include "data/h5_handle.h"
#include "data/sample_source.h"

namespace hpc::data {

namespace {

// The quick check scans this many samples for NaN/Inf: enough to catch a
// file written from uninitialised or NaN-filled arrays, cheap on any size.
constexpr int64_t QUICK_CHECK_SAMPLES = 4096;

enum class Stored { F32, U8, I32, Other };

Stored stored_type(hid_t dset) {
  H5Handle t = H5Handle::type(H5Dget_type(dset));
  if (!t.valid()) return Stored::Other;
  const H5T_class_t cls = H5Tget_class(t.id());
  const size_t size = H5Tget_size(t.id());
  if (cls == H5T_FLOAT && size == 4) return Stored::F32;
  if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(t.id()) == H5T_SGN_NONE) return Stored::U8;
  if (cls == H5T_INTEGER && size == 4 && H5Tget_sign(t.id()) == H5T_SGN_2) return Stored::I32;
  return Stored::Other;
}

std::string type_name(hid_t dset) {
  H5Handle t = H5Handle::type(H5Dget_type(dset));
  return t.valid() ? h5_type_name(t.id()) : "of an unreadable type";
}

std::vector<int64_t> dims_of(hid_t dset, const std::string& what) {
  H5Handle space = H5Handle::space(h5_check(H5Dget_space(dset), what + ": cannot read its shape"));
  const int rank = h5_check(H5Sget_simple_extent_ndims(space.id()), what + ": cannot read its shape");
  std::vector<hsize_t> d(static_cast<size_t>(rank));
  h5_check(H5Sget_simple_extent_dims(space.id(), d.data(), nullptr), what + ": cannot read its shape");
  return std::vector<int64_t>(d.begin(), d.end());
}

// A numeric scalar attribute, or nullopt when absent.
std::optional<double> number_attr(hid_t obj, const char* name, const std::string& what) {
  const std::string where = what + ": attribute '" + name + "'";
  if (h5_check(H5Aexists(obj, name), where + " cannot be read") == 0) return std::nullopt;
  H5Handle a = H5Handle::attr(h5_check(H5Aopen(obj, name, H5P_DEFAULT), where + " cannot be opened"));
  H5Handle t = H5Handle::type(h5_check(H5Aget_type(a.id()), where + " cannot be read"));
  H5Handle s = H5Handle::space(h5_check(H5Aget_space(a.id()), where + " cannot be read"));
  const H5T_class_t cls = H5Tget_class(t.id());
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || H5Sget_simple_extent_npoints(s.id()) != 1)
    throw UserError(where + " must be a single number");
  double v = 0;
  h5_check(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v), where + " cannot be read");
  if (!std::isfinite(v)) throw UserError(where + " is not finite");
  return v;
}

std::optional<int64_t> num_classes_attr(hid_t y, const std::string& what) {
  std::optional<double> v = number_attr(y, "num_classes", what);
  if (!v) return std::nullopt;
  if (*v < 1 || *v > 2147483647.0 || *v != std::floor(*v))
    throw UserError(what + ": attribute 'num_classes' must be a positive integer, got " + std::to_string(*v));
  return static_cast<int64_t>(*v);
}

bool link_exists(hid_t file, const std::string& name) {
  // H5Lexists fails (rather than answering false) when a parent is missing, so walk down.
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = name.find('/', pos + 1);
    prefix = name.substr(0, pos);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

H5Handle open_dataset(hid_t file, const std::string& name, const std::string& file_what,
                      const std::string& split) {
  if (!link_exists(file, name))
    throw UserError(file_what + ": " + name + " is missing (a dataset file needs /" + split + "/x and /" +
                    split + "/y)");
  H5Handle dapl = h5_dataset_access(file_what + ": " + name);
  return H5Handle::dataset(h5_check(H5Dopen2(file, name.c_str(), dapl.id()),
                                    file_what + ": " + name + " cannot be opened as a dataset"));
}

int64_t max_label(const SampleSource& y) {
  int32_t m = INT32_MIN;
  scan_rows(y, 0, y.rows(), [&](const std::byte* rows, int64_t, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      int32_t v;
      std::memcpy(&v, rows + 4 * i, sizeof v);
      m = std::max(m, v);
    }
  });
  return m;
}

// Where num_classes comes from: see the header. `source` names it for error messages.
int64_t resolve_num_classes(hid_t file, hid_t y, const SampleSource& labels, const std::string& split,
                            const std::string& file_what, std::string& source) {
  const std::string yname = "/" + split + "/y";
  std::optional<int64_t> own = num_classes_attr(y, file_what + ": " + yname);
  if (split == "train" || !link_exists(file, "/train/y")) {
    if (own) {
      source = "the num_classes attribute of " + yname;
      return *own;
    }
    source = "max label of " + yname + " + 1";
    return std::max<int64_t>(max_label(labels) + 1, 1);
  }
  const std::string what = file_what + ": /train/y";
  H5Handle train_y = open_dataset(file, "/train/y", file_what, "train");
  std::optional<int64_t> train_attr = num_classes_attr(train_y.id(), what);
  if (own && train_attr && *own != *train_attr)
    throw UserError(file_what + ": num_classes is " + std::to_string(*own) + " on " + yname + " but " +
                    std::to_string(*train_attr) + " on /train/y");
  if (own || train_attr) {
    source = "the num_classes attribute of " + std::string(own ? yname : "/train/y");
    return own ? *own : *train_attr;
  }
  const std::vector<int64_t> d = dims_of(train_y.id(), what);
  if (stored_type(train_y.id()) != Stored::I32 || d.size() != 1 || d[0] == 0)
    throw UserError(file_what + ": " + yname + " holds class ids but /train/y does not (int32 [N] expected)");
  std::unique_ptr<SampleSource> train_labels =
      open_source(file, SourceRequest{"/train/y", H5T_NATIVE_INT32, d[0], sizeof(int32_t), true, what});
  source = "max label of /train/y + 1";
  return std::max<int64_t>(max_label(*train_labels) + 1, 1);
}

// Also returns the classes without a sample.
std::vector<int64_t> check_labels(const SampleSource& y, int64_t num_classes, const std::string& what,
                                  const std::string& source) {
  // The first 21 absent classes lie below rows + 21 (at most `rows` classes have a sample), so the
  // tally needs no more than that: a file claiming billions of classes costs no more than its labels.
  constexpr int64_t LISTED = 21;
  const int64_t tallied = std::min(num_classes, y.rows() + LISTED);
  std::vector<bool> seen(static_cast<size_t>(tallied), false);
  scan_rows(y, 0, y.rows(), [&](const std::byte* rows, int64_t first, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      int32_t v;
      std::memcpy(&v, rows + 4 * i, sizeof v);
      if (v < 0 || v >= num_classes)
        throw UserError(what + ": label " + std::to_string(v) + " at sample " + std::to_string(first + i) +
                        " is outside [0, " + std::to_string(num_classes) + ") (" + source + ")");
      if (v < tallied) seen[static_cast<size_t>(v)] = true;
    }
  });
  // The warning names 20 and says whether there are more.
  std::vector<int64_t> missing;
  for (int64_t c = 0; c < tallied && static_cast<int64_t>(missing.size()) < LISTED; ++c)
    if (!seen[static_cast<size_t>(c)]) missing.push_back(c);
  return missing;
}

void check_finite(const SampleSource& src, int64_t rows, const std::string& what) {
  const int64_t per_row = src.row_bytes() / static_cast<int64_t>(sizeof(float));
  scan_rows(src, 0, rows, [&](const std::byte* block, int64_t first, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const std::byte* row = block + i * src.row_bytes();
      for (int64_t j = 0; j < per_row; ++j) {
        float v;
        std::memcpy(&v, row + 4 * j, sizeof v);
        if (!std::isfinite(v))
          throw UserError(what + ": sample " + std::to_string(first + i) + " contains " +
                          (std::isnan(v) ? "NaN" : "Inf") + " (element " + std::to_string(j) + ")");
      }
    }
  });
}

}  // namespace

H5Dataset::H5Dataset(const std::string& path, const std::string& split, const OpenOptions& options)
    : path_(path), split_(split) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  const std::string file_what = "data file '" + path + "'";
  const std::string xname = "/" + split + "/x", yname = "/" + split + "/y";
  const std::string xwhat = file_what + ": " + xname, ywhat = file_what + ": " + yname;

  H5Handle file = h5_open_read_only(path);
  H5Handle x = open_dataset(file.id(), xname, file_what, split);
  H5Handle y = open_dataset(file.id(), yname, file_what, split);

  const Stored xs = stored_type(x.id()), ys = stored_type(y.id());
  if (xs != Stored::F32 && xs != Stored::U8)
    throw UserError(xwhat + " is " + type_name(x.id()) + "; x must be float32 or uint8");
  if (ys != Stored::I32 && ys != Stored::F32)
    throw UserError(ywhat + " is " + type_name(y.id()) +
                    "; y must be int32 class ids or float32 regression targets");
  info_.x_dtype = xs == Stored::F32 ? DType::F32 : DType::U8;
  info_.classification = ys == Stored::I32;

  const std::vector<int64_t> xd = dims_of(x.id(), xwhat), yd = dims_of(y.id(), ywhat);
  if (xd.size() < 2)
    throw UserError(xwhat + " has shape " + Shape(xd).str() + "; x must be N x sample dims (rank >= 2)");
  if (info_.classification ? yd.size() != 1 : (yd.empty() || yd.size() > 2))
    throw UserError(ywhat + " has shape " + Shape(yd).str() +
                    "; y must be N class ids (int32) or N x k targets (float32)");
  if (xd[0] != yd[0])
    throw UserError(file_what + ": " + xname + " has " + std::to_string(xd[0]) + " samples but " + yname +
                    " has " + std::to_string(yd[0]));
  if (xd[0] == 0) throw UserError(xwhat + " has no samples");
  info_.size = xd[0];
  info_.sample_shape = Shape(std::vector<int64_t>(xd.begin() + 1, xd.end()));
  if (info_.sample_shape.count() == 0)
    throw UserError(xwhat + ": sample shape " + info_.sample_shape.str() + " is empty");
  // A chunked dataset that was never written claims any shape in a few bytes; validation and
  // every batch buffer hold whole samples, so a sample must fit in memory several times over.
  if (info_.sample_shape.count() > (int64_t(1) << 28))
    throw UserError(xwhat + ": samples of shape " + info_.sample_shape.str() +
                    " are larger than hpctrain supports (2^28 elements, 1 GiB as float32)");
  if (yd.size() == 2 && yd[1] > (int64_t(1) << 28))
    throw UserError(ywhat + ": " + std::to_string(yd[1]) +
                    " targets per sample is more than hpctrain supports");
  if (!info_.classification) {
    info_.target_shape = Shape{yd.size() == 2 ? yd[1] : 1};
    if (info_.target_shape[0] == 0) throw UserError(ywhat + " has zero targets per sample");
  }

  if (info_.x_dtype == DType::U8) read_normalisation(x.id(), info_.sample_shape[0], xwhat, info_);

  const int64_t xsize = info_.x_dtype == DType::F32 ? 4 : 1;
  x_ = open_source(file.id(),
                   SourceRequest{xname, info_.x_dtype == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT8,
                                 info_.size, info_.sample_shape.count() * xsize, options.allow_mmap, xwhat});
  y_ =
      open_source(file.id(), SourceRequest{yname, info_.classification ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT,
                                           info_.size, (info_.classification ? 1 : info_.target_shape[0]) * 4,
                                           options.allow_mmap, ywhat});

  const int64_t scan = options.full_check ? info_.size : std::min(info_.size, QUICK_CHECK_SAMPLES);
  if (info_.x_dtype == DType::F32) check_finite(*x_, scan, xwhat);
  if (info_.classification) {
    std::string source;
    info_.num_classes = resolve_num_classes(file.id(), y.id(), *y_, split, file_what, source);
    info_.missing_classes = check_labels(*y_, info_.num_classes, ywhat, source);
    info_.num_classes_source = source;
  } else {
    check_finite(*y_, scan, ywhat);
  }

  // One table per channel where the file gives per-channel statistics, else one for all.
  const size_t tables = info_.channel_mean.empty() ? 1 : info_.channel_mean.size();
  u8_f64_.resize(tables);
  for (size_t c = 0; c < tables; ++c) {
    const double mean = tables > 1 ? info_.channel_mean[c] : info_.mean,
                 std = tables > 1 ? info_.channel_std[c] : info_.std;
    for (int b = 0; b < 256; ++b) u8_f64_[c][static_cast<size_t>(b)] = (b * info_.scale - mean) / std;
    u8_gain_.push_back(static_cast<float>(info_.scale / std));
    u8_offset_.push_back(static_cast<float>(-mean / std));
  }
}

H5Dataset::~H5Dataset() = default;

std::string H5Dataset::describe() const {
  std::string s = std::to_string(info_.size) + " " + split_ + " samples of " + info_.sample_shape.str() +
                  " (" + dtype_name(info_.x_dtype) + ")";
  if (info_.classification) s += ", " + std::to_string(info_.num_classes) + " classes";
  return s;
}
H5Dataset::H5Dataset(H5Dataset&&) noexcept = default;
H5Dataset& H5Dataset::operator=(H5Dataset&&) noexcept = default;

bool H5Dataset::has_split(const std::string& path, const std::string& split) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle file = h5_open_read_only(path);
  return link_exists(file.id(), "/" + split);
}

bool H5Dataset::mapped() const { return x_->data() && y_->data(); }

std::vector<std::string> H5Dataset::unmapped() const {
  std::vector<std::string> out;
  for (const auto& [name, src] : {std::pair{"x", x_.get()}, std::pair{"y", y_.get()}})
    if (!src->data()) out.push_back("/" + split_ + "/" + name + " (" + src->why_not_mapped() + ")");
  return out;
}

// count float32 values from src into dst (float or double). A mapped dataset's rows start
// wherever HDF5 placed the data in the file, not necessarily at a multiple of 4 bytes, so
// they are loaded with memcpy, never through a float pointer.
namespace {
template <typename T>
void copy_floats(const std::byte* src, int64_t count, T* dst) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
  } else {
    for (int64_t j = 0; j < count; ++j) {
      float v;
      std::memcpy(&v, src + j * static_cast<int64_t>(sizeof v), sizeof v);
      dst[j] = v;
    }
  }
}
}  // namespace

template <typename T>
void H5Dataset::gather_x(const std::byte* rows, const int64_t* indices, int64_t n, T* out) const {
  const int64_t per = info_.sample_shape.count();
  const int64_t stride = x_->row_bytes();
  auto row = [&](int64_t i) { return rows + (indices ? indices[i] : i) * stride; };
  if (info_.x_dtype == DType::U8) {
    const auto tables = static_cast<int64_t>(u8_gain_.size());
    const int64_t span = per / tables;  // elements that share a table: a channel's plane, or the whole sample
    for (int64_t i = 0; i < n; ++i) {
      const auto* src = reinterpret_cast<const uint8_t*>(row(i));
      T* dst = out + i * per;
      for (int64_t t = 0; t < tables; ++t) {
        const uint8_t* s = src + t * span;
        T* d = dst + t * span;
        if constexpr (std::is_same_v<T, float>) {
          const float gain = u8_gain_[static_cast<size_t>(t)],
                      offset = u8_offset_[static_cast<size_t>(t)];  // locals: the loop vectorises
          for (int64_t j = 0; j < span; ++j) d[j] = static_cast<float>(s[j]) * gain + offset;
        } else {
          const std::array<double, 256>& table = u8_f64_[static_cast<size_t>(t)];
          for (int64_t j = 0; j < span; ++j) d[j] = table[s[j]];
        }
      }
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) copy_floats(row(i), per, out + i * per);
}

void H5Dataset::gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const {
  const int64_t per = info_.sample_shape.count();
  const int64_t k = info_.classification ? 1 : info_.target_shape[0];
  HPC_ASSERT(x.device() == Device::CPU && y.device() == Device::CPU, "H5Dataset::gather into device tensors");
  HPC_ASSERT(x.shape().rank() >= 1 && x.shape()[0] == n && x.count() == n * per,
             "gather: x is " + x.shape().str() + ", samples are " + info_.sample_shape.str());
  HPC_ASSERT(y.count() == n * k,
             "gather: y is " + y.shape().str() + " for " + std::to_string(n) + " samples");
  HPC_ASSERT(!info_.classification || y.dtype() == DType::I32, "gather: class ids go into an int32 tensor");
  for (int64_t i = 0; i < n; ++i)
    HPC_ASSERT(
        indices[i] >= 0 && indices[i] < info_.size,
        "gather: index " + std::to_string(indices[i]) + " outside [0, " + std::to_string(info_.size) + ")");

  // Mapped rows are converted straight from the mapping. Otherwise the rows
  // are read in one H5Dread, into x itself when no conversion is needed.
  std::vector<std::byte> staged;
  const std::byte* xrows = x_->data();
  const int64_t* xidx = indices;
  // Test-only (HPCTRAIN_FAULT eio@data_read): the error a failed read of mapped rows ends in. (A real
  // EIO under a mapping is a SIGBUS, see file_mapping.h; the H5Dread path has its own hook.)
  if (xrows)
    if (const int err = fault_at(FaultPoint::DataRead))
      throw_read_error("data file '" + path_ + "': /" + split_ + "/x", row_span(indices, n), err);
  if (!xrows) {
    xidx = nullptr;
    if (info_.x_dtype == DType::F32 && x.dtype() == DType::F32) {
      x_->read_rows(indices, n, static_cast<std::byte*>(x.raw()));
    } else {
      staged.resize(static_cast<size_t>(n * x_->row_bytes()));
      x_->read_rows(indices, n, staged.data());
      xrows = staged.data();
    }
  }
  if (xrows)
    backend::dispatch_float(x.dtype(), "H5Dataset::gather x",
                            [&]<typename T>() { gather_x<T>(xrows, xidx, n, x.data<T>()); });

  const std::byte* yrows = y_->data();
  if (!yrows && (info_.classification || y.dtype() == DType::F32)) {
    y_->read_rows(indices, n, static_cast<std::byte*>(y.raw()));  // already int32 / float32 rows
    return;
  }
  if (!yrows) {
    staged.resize(static_cast<size_t>(n * y_->row_bytes()));
    y_->read_rows(indices, n, staged.data());
  }
  auto yrow = [&](int64_t i) {
    return yrows ? yrows + indices[i] * y_->row_bytes() : staged.data() + i * y_->row_bytes();
  };
  if (info_.classification) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(y.data<int32_t>() + i, yrow(i), sizeof(int32_t));
    return;
  }
  backend::dispatch_float(y.dtype(), "H5Dataset::gather y", [&]<typename T>() {
    for (int64_t i = 0; i < n; ++i) copy_floats(yrow(i), k, y.data<T>() + i * k);
  });
}

namespace {

// A numeric attribute of 1 or `channels` values, or nullopt when absent.
std::optional<std::vector<double>> numbers_attr(hid_t obj, const char* name, int64_t channels,
                                                const std::string& what) {
  const std::string where = what + ": attribute '" + name + "'";
  if (h5_check(H5Aexists(obj, name), where + " cannot be read") == 0) return std::nullopt;
  H5Handle a = H5Handle::attr(h5_check(H5Aopen(obj, name, H5P_DEFAULT), where + " cannot be opened"));
  H5Handle t = H5Handle::type(h5_check(H5Aget_type(a.id()), where + " cannot be read"));
  H5Handle s = H5Handle::space(h5_check(H5Aget_space(a.id()), where + " cannot be read"));
  const H5T_class_t cls = H5Tget_class(t.id());
  const hssize_t n = H5Sget_simple_extent_npoints(s.id());
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || (n != 1 && n != channels))
    throw UserError(where + " must be one number or one per channel (" + std::to_string(channels) + ")");
  std::vector<double> v(static_cast<size_t>(n));
  h5_check(H5Aread(a.id(), H5T_NATIVE_DOUBLE, v.data()), where + " cannot be read");
  for (double x : v)
    if (!std::isfinite(x)) throw UserError(where + " is not finite");
  return v;
}

}  // namespace

void read_normalisation(hid_t dset, int64_t channels, const std::string& what, SplitInfo& info) {
  info.scale = number_attr(dset, "scale", what).value_or(1.0);
  const std::vector<double> mean =
      numbers_attr(dset, "mean", channels, what).value_or(std::vector<double>{0.0});
  const std::vector<double> std =
      numbers_attr(dset, "std", channels, what).value_or(std::vector<double>{1.0});
  const size_t c = std::max(mean.size(), std.size());
  info.mean = mean[0];
  info.std = std[0];
  info.channel_mean.clear();
  info.channel_std.clear();
  if (c > 1)
    for (size_t i = 0; i < c; ++i) {
      info.channel_mean.push_back(mean.size() > 1 ? mean[i] : mean[0]);
      info.channel_std.push_back(std.size() > 1 ? std[i] : std[0]);
    }
  for (size_t i = 0; i < c; ++i) {
    const double m = c > 1 ? info.channel_mean[i] : info.mean, sd = c > 1 ? info.channel_std[i] : info.std;
    if (sd == 0) throw UserError(what + ": attribute 'std' is 0");
    // gather() computes byte·gain + offset in float32: every byte must map to a finite value there
    // (1e30 leaves room for the float rounding of gain and offset).
    const double lo = -m / sd, hi = (255 * info.scale - m) / sd;
    if (!(std::fabs(lo) <= 1e30 && std::fabs(hi) <= 1e30)) {
      char range[64];
      std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
      throw UserError(what + ": attributes scale/mean/std map bytes 0-255 to " + range +
                      ", beyond the float32 inputs hpctrain computes with (|x| <= 1e30)");
    }
  }
}

std::unique_ptr<SampleSource> open_class_labels(hid_t file, const std::string& split, int64_t rows,
                                                bool allow_mmap, const std::string& file_what,
                                                SplitInfo& info) {
  const std::string yname = "/" + split + "/y", ywhat = file_what + ": " + yname;
  H5Handle y = open_dataset(file, yname, file_what, split);
  const std::vector<int64_t> yd = dims_of(y.id(), ywhat);
  if (stored_type(y.id()) != Stored::I32 || yd.size() != 1)
    throw UserError(ywhat + " is " + type_name(y.id()) + " " + Shape(yd).str() +
                    "; it must hold int32 class ids [N]");
  if (yd[0] != rows)
    throw UserError(ywhat + " has " + std::to_string(yd[0]) + " labels for " + std::to_string(rows) +
                    " samples");
  std::unique_ptr<SampleSource> labels =
      open_source(file, SourceRequest{yname, H5T_NATIVE_INT32, rows, sizeof(int32_t), allow_mmap, ywhat});
  std::string source;
  info.num_classes = resolve_num_classes(file, y.id(), *labels, split, file_what, source);
  info.missing_classes = check_labels(*labels, info.num_classes, ywhat, source);
  info.num_classes_source = source;
  return labels;
}

std::string mmap_advice(const std::vector<const Dataset*>& datasets) {
  std::string which, files;
  for (const Dataset* ds : datasets) {
    if (!ds || ds->mapped()) continue;
    for (const std::string& u : ds->unmapped()) which += (which.empty() ? "" : ", ") + u;
    if (files.find("'" + ds->path() + "'") == std::string::npos)
      files += (files.empty() ? "" : " and ") + std::string("'") + ds->path() + "'";
  }
  if (which.empty()) return "";
  return "info: data " + files + " is not memory-mappable: " + which +
         "; reading it with H5Dread, which is slower (one reader at a time); make it mappable with "
         "'hpcdata repack IN OUT' (contiguous, 4 KiB-aligned)";
}

}  // namespace hpc::data
