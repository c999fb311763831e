// DatasetWriter: output checks, contiguous aligned datasets, temp file + rename.
#include "dataset_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace hpc::data_tools {

using data::h5_check;
using data::H5Handle;
namespace fs = std::filesystem;

namespace {

// Page alignment for mmap. The threshold is raw data of 512 bytes: every
// dataset but a handful of labels starts on a page; metadata (object
// headers, attributes, allocated in small blocks) stays packed.
constexpr hsize_t ALIGNMENT = 4096, ALIGNMENT_THRESHOLD = 512;

// Little-endian on disk whatever the host: the layout is fixed, readers convert.
hid_t file_type(DType t) {
  switch (t) {
    case DType::U8:
      return H5T_STD_U8LE;
    case DType::U16:
      return H5T_STD_U16LE;
    case DType::I32:
      return H5T_STD_I32LE;
    case DType::F32:
      return H5T_IEEE_F32LE;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("DatasetWriter: no file type for ") + dtype_name(t));
}

hid_t memory_type(DType t) {
  switch (t) {
    case DType::U8:
      return H5T_NATIVE_UINT8;
    case DType::U16:
      return H5T_NATIVE_UINT16;
    case DType::I32:
      return H5T_NATIVE_INT32;
    case DType::F32:
      return H5T_NATIVE_FLOAT;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("DatasetWriter: no memory type for ") + dtype_name(t));
}

// fsync of a file or directory; the rename is only durable once both are on disk.
bool sync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// The errno of a failed write inside HDF5: its sec2 driver reports "file
// write failed: …, errno = 28, error message = 'No space left on device'"
// as the innermost message, which h5_check puts into ours. 0: none.
int errno_in(const std::string& message) {
  const size_t at = message.find("errno = ");
  return at == std::string::npos ? 0 : std::atoi(message.c_str() + at + 8);
}

// A full disk or quota becomes its own error (exit 74); anything else is rethrown as it is.
[[noreturn]] void rethrow_write_error(const UserError& e, const std::string& path, int err = 0) {
  if (err == 0) err = errno_in(e.what());
  if (err == ENOSPC) throw IoError("cannot write " + path + ": no space left on device (ENOSPC)");
  if (err == EDQUOT) throw IoError("cannot write " + path + ": disk quota exceeded (EDQUOT)");
  throw e;
}

}  // namespace

DatasetWriter::DatasetWriter(std::string path, bool force) : path_(std::move(path)) {
  if (path_.empty()) throw UserError("no output file given (-o FILE)");
  std::error_code ec;
  const auto status = fs::status(path_, ec);
  if (fs::is_directory(status)) throw UserError("output " + path_ + " is a directory");
  if (fs::exists(status) && !force)
    throw UserError("output " + path_ + " exists (use --force to overwrite it)");
  const std::string dir =
      fs::path(path_).parent_path().empty() ? "." : fs::path(path_).parent_path().string();
  if (!fs::is_directory(fs::status(dir, ec))) throw UserError("output directory " + dir + " does not exist");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UserError("output directory " + dir + " is not writable (" + std::strerror(errno) + ")");

  tmp_path_ = path_ + ".tmp-" + std::to_string(::getpid());
  data::H5QuietErrors quiet;
  const std::string what = "cannot create " + tmp_path_;
  H5Handle fapl = H5Handle::plist(h5_check(H5Pcreate(H5P_FILE_ACCESS), what));
  h5_check(H5Pset_alignment(fapl.id(), ALIGNMENT_THRESHOLD, ALIGNMENT), what);
  data::disable_file_locking(fapl.id(), what);
  // TRUNC, not EXCL: a leftover with our pid can only be from a dead process.
  file_ = H5Handle::file(h5_check(H5Fcreate(tmp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), what));
}

DatasetWriter::~DatasetWriter() {
  if (committed_) return;
  // Closed without the warning a failing close prints: after a full disk they fail, and the
  // error that brought us here has already said what went wrong.
  for (auto& [name, o] : open_) o.dataset.close();
  open_.clear();
  file_.close();
  if (!tmp_path_.empty()) std::remove(tmp_path_.c_str());
}

void DatasetWriter::write(const std::string& name, const void* data, DType dtype, const Shape& shape) {
  create(name, dtype, shape);
  write_rows(name, 0, shape[0], data);
}

void DatasetWriter::create(const std::string& name, DType dtype, const Shape& shape, bool unsigned_in_file) {
  HPC_ASSERT(!committed_ && file_.valid(), "DatasetWriter::create after commit");
  HPC_ASSERT(shape.rank() >= 1 && !open_.count(name), "DatasetWriter::create " + name);
  data::H5QuietErrors quiet;
  const std::string what = "cannot write " + name + " to " + tmp_path_;
  std::vector<hsize_t> dims(shape.dims().begin(), shape.dims().end());
  H5Handle space = H5Handle::space(h5_check(H5Screate_simple(shape.rank(), dims.data(), nullptr), what));
  H5Handle lcpl = H5Handle::plist(h5_check(H5Pcreate(H5P_LINK_CREATE), what));
  h5_check(H5Pset_create_intermediate_group(lcpl.id(), 1), what);
  // Contiguous layout, no filters (the default): mmappable. Every row is
  // written, so the fill value would only be written twice.
  H5Handle dcpl = H5Handle::plist(h5_check(H5Pcreate(H5P_DATASET_CREATE), what));
  h5_check(H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER), what);
  H5Handle dset = H5Handle::dataset(
      h5_check(H5Dcreate2(file_.id(), name.c_str(),
                          unsigned_in_file && dtype == DType::I32 ? H5T_STD_U32LE : file_type(dtype),
                          space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT),
               what));
  open_.emplace(name, Open{std::move(dset), dtype, shape});
}

void DatasetWriter::write_rows(const std::string& name, int64_t first, int64_t count, const void* data) {
  auto it = open_.find(name);
  HPC_ASSERT(!committed_ && it != open_.end(), "DatasetWriter::write_rows of " + name + " before create");
  const Open& o = it->second;
  HPC_ASSERT(first >= 0 && count >= 0 && first + count <= o.shape[0], "DatasetWriter::write_rows range");
  if (count == 0) return;
  data::H5QuietErrors quiet;
  const std::string what = "cannot write " + name + " to " + tmp_path_;
  std::vector<hsize_t> start(static_cast<size_t>(o.shape.rank()), 0),
      dims(o.shape.dims().begin(), o.shape.dims().end());
  start[0] = static_cast<hsize_t>(first);
  dims[0] = static_cast<hsize_t>(count);
  H5Handle fspace = H5Handle::space(h5_check(H5Dget_space(o.dataset.id()), what));
  h5_check(H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, start.data(), nullptr, dims.data(), nullptr),
           what);
  H5Handle mspace = H5Handle::space(h5_check(H5Screate_simple(o.shape.rank(), dims.data(), nullptr), what));
  try {
    h5_check(H5Dwrite(o.dataset.id(), memory_type(o.dtype), mspace.id(), fspace.id(), H5P_DEFAULT, data),
             what);
  } catch (const UserError& e) {
    rethrow_write_error(e, path_);
  }
}

void DatasetWriter::write_i64(const std::string& name, const std::vector<int64_t>& values) {
  HPC_ASSERT(!committed_ && file_.valid() && !values.empty(), "DatasetWriter::write_i64 " + name);
  data::H5QuietErrors quiet;
  const std::string what = "cannot write " + name + " to " + tmp_path_;
  const hsize_t n = values.size();
  H5Handle space = H5Handle::space(h5_check(H5Screate_simple(1, &n, nullptr), what));
  H5Handle lcpl = H5Handle::plist(h5_check(H5Pcreate(H5P_LINK_CREATE), what));
  h5_check(H5Pset_create_intermediate_group(lcpl.id(), 1), what);
  H5Handle dset = H5Handle::dataset(h5_check(
      H5Dcreate2(file_.id(), name.c_str(), H5T_STD_I64LE, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT),
      what));
  try {
    h5_check(H5Dwrite(dset.id(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), what);
  } catch (const UserError& e) {
    dset.close();  // quietly, as in the destructor
    rethrow_write_error(e, path_);
  }
}

void DatasetWriter::set_attr(const std::string& dataset, const std::string& attr, double value) {
  data::H5QuietErrors quiet;
  const std::string what = "cannot write attribute " + attr + " of " + dataset;
  H5Handle obj = H5Handle::dataset(h5_check(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), what));
  H5Handle space = H5Handle::space(h5_check(H5Screate(H5S_SCALAR), what));
  H5Handle a = H5Handle::attr(h5_check(
      H5Acreate2(obj.id(), attr.c_str(), H5T_IEEE_F64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), what));
  h5_check(H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &value), what);
}

void DatasetWriter::set_attr(const std::string& dataset, const std::string& attr, int64_t value) {
  data::H5QuietErrors quiet;
  const std::string what = "cannot write attribute " + attr + " of " + dataset;
  H5Handle obj = H5Handle::dataset(h5_check(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), what));
  H5Handle space = H5Handle::space(h5_check(H5Screate(H5S_SCALAR), what));
  H5Handle a = H5Handle::attr(h5_check(
      H5Acreate2(obj.id(), attr.c_str(), H5T_STD_I64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), what));
  h5_check(H5Awrite(a.id(), H5T_NATIVE_INT64, &value), what);
}

void DatasetWriter::set_attr(const std::string& dataset, const std::string& attr, const std::string& value) {
  data::H5QuietErrors quiet;
  const std::string what = "cannot write attribute " + attr + " of " + dataset;
  H5Handle obj = H5Handle::dataset(h5_check(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), what));
  H5Handle space = H5Handle::space(h5_check(H5Screate(H5S_SCALAR), what));
  H5Handle type = H5Handle::type(h5_check(H5Tcopy(H5T_C_S1), what));
  // Fixed-length (h5py reads it as bytes).
  h5_check(H5Tset_size(type.id(), std::max<size_t>(1, value.size())), what);
  H5Handle a = H5Handle::attr(
      h5_check(H5Acreate2(obj.id(), attr.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), what));
  h5_check(H5Awrite(a.id(), type.id(), value.c_str()), what);
}

void DatasetWriter::set_attr(const std::string& dataset, const std::string& attr,
                             const std::vector<double>& values) {
  data::H5QuietErrors quiet;
  const std::string what = "cannot write attribute " + attr + " of " + dataset;
  H5Handle obj = H5Handle::dataset(h5_check(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), what));
  const hsize_t n = values.size();
  H5Handle space = H5Handle::space(h5_check(H5Screate_simple(1, &n, nullptr), what));
  H5Handle a = H5Handle::attr(h5_check(
      H5Acreate2(obj.id(), attr.c_str(), H5T_IEEE_F64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), what));
  h5_check(H5Awrite(a.id(), H5T_NATIVE_DOUBLE, values.data()), what);
}

void DatasetWriter::set_attr(const std::string& dataset, const std::string& attr,
                             const std::vector<std::string>& values) {
  data::H5QuietErrors quiet;
  const std::string what = "cannot write attribute " + attr + " of " + dataset;
  H5Handle obj = H5Handle::dataset(h5_check(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), what));
  const hsize_t n = values.size();
  H5Handle space = H5Handle::space(h5_check(H5Screate_simple(1, &n, nullptr), what));
  H5Handle type = H5Handle::type(h5_check(H5Tcopy(H5T_C_S1), what));
  h5_check(H5Tset_size(type.id(), H5T_VARIABLE), what);
  h5_check(H5Tset_cset(type.id(), H5T_CSET_UTF8), what);
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  H5Handle a = H5Handle::attr(
      h5_check(H5Acreate2(obj.id(), attr.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), what));
  h5_check(H5Awrite(a.id(), type.id(), ptrs.data()), what);
}

void DatasetWriter::commit() {
  HPC_ASSERT(!committed_ && file_.valid(), "DatasetWriter::commit twice");
  try {
    data::H5QuietErrors quiet;
    // Closing a dataset writes what HDF5 still buffers: its failure is the write's.
    bool closed = true;
    for (auto& [name, o] : open_) closed = o.dataset.close() >= 0 && closed;
    open_.clear();
    if (file_.close() < 0 || !closed) data::throw_h5_error("cannot finish writing " + tmp_path_);
  } catch (const UserError& e) {
    rethrow_write_error(e, path_);
  }
  if (!sync_path(tmp_path_, O_RDONLY)) {
    const int err = errno;
    rethrow_write_error(UserError("cannot sync " + tmp_path_ + " to disk (" + std::strerror(err) + ")"),
                        path_, err);
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    throw UserError("cannot rename " + tmp_path_ + " to " + path_ + " (" + std::strerror(errno) + ")");
  committed_ = true;
  // The data is safe in the file; a directory that cannot be synced costs at most the name on a crash.
  const fs::path dir = fs::path(path_).parent_path();
  sync_path(dir.empty() ? "." : dir.string(), O_RDONLY | O_DIRECTORY);
}

}  // namespace hpc::data_tools
