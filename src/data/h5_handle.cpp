// H5Handle close, error-stack silencing and the HDF5 → UserError helper.
#include "data/h5_handle.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace hpc::data {

namespace {
// A write that fails for lack of space (ENOSPC, EDQUOT) makes H5Fclose fail
// half-way, and HDF5's own exit handler then closes that file again and
// crashes (SIGSEGV in H5F__close_cb, HDF5 1.10): a clean "disk full" exit
// would end as a segfault. Every file we write is closed explicitly, so the
// handler has nothing to do for us; it must be switched off before the
// library's first call, hence at static initialisation.
[[maybe_unused]] const bool NO_HDF5_ATEXIT = H5dont_atexit() >= 0;
}  // namespace

std::unique_lock<std::recursive_mutex> h5_lock() {
  static std::recursive_mutex library;
  return std::unique_lock<std::recursive_mutex>(library);
}

herr_t H5Handle::close() noexcept {
  herr_t status = id_ >= 0 && close_ ? close_(id_) : 0;
  id_ = H5I_INVALID_HID;
  return status;
}

void H5Handle::reset() noexcept {
  if (close() < 0) std::fprintf(stderr, "hpctrain: warning: closing an HDF5 %s failed\n", kind_);
}

H5QuietErrors::H5QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

H5QuietErrors::~H5QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

// Walking upward visits the innermost frame first: the function that found
// the problem, whose description is the specific one ("file signature not
// found"); the outer frames only say "unable to open file".
herr_t take_innermost(unsigned /*depth*/, const H5E_error2_t* err, void* out) {
  auto* detail = static_cast<std::string*>(out);
  if (detail->empty() && err->desc && *err->desc) *detail = err->desc;
  return 0;
}

}  // namespace

std::string h5_error_detail() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, &detail);
  // Some HDF5 messages end in a newline or carry embedded ones; keep the report on one line.
  for (char& c : detail)
    if (c == '\n' || c == '\r') c = ' ';
  while (!detail.empty() && detail.back() == ' ') detail.pop_back();
  return detail;
}

void throw_h5_error(const std::string& what) {
  std::string detail = h5_error_detail();
  H5Eclear2(H5E_DEFAULT);
  throw UserError(detail.empty() ? what : what + " (" + detail + ")");
}

std::string h5_type_name(hid_t type) {
  const size_t bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return "float" + std::to_string(bits);
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    default:
      return "an unsupported type";
  }
}

void disable_file_locking(hid_t fapl, const std::string& what) {
#if H5_VERSION_GE(1, 12, 1) || (H5_VERSION_GE(1, 10, 7) && !H5_VERSION_GE(1, 11, 0))
  h5_check(H5Pset_file_locking(fapl, false, true), what + ": cannot turn file locking off");
#else
  // No per-file switch in this HDF5: the library reads the environment at
  // open time. A value the user set wins (overwrite = 0).
  ::setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
#endif
}

H5Handle h5_dataset_access(const std::string& what) {
  H5Handle fapl = H5Handle::plist(h5_check(H5Pcreate(H5P_FILE_ACCESS), what + ": H5Pcreate failed"));
  disable_file_locking(fapl.id(), what);
  H5Handle dapl = H5Handle::plist(h5_check(H5Pcreate(H5P_DATASET_ACCESS), what + ": H5Pcreate failed"));
  h5_check(H5Pset_elink_fapl(dapl.id(), fapl.id()), what + ": cannot set the external-link file access");
  h5_check(H5Pset_elink_acc_flags(dapl.id(), H5F_ACC_RDONLY),
           what + ": cannot set the external-link file access");
  h5_check(H5Pset_chunk_cache(dapl.id(), CHUNK_CACHE_SLOTS, CHUNK_CACHE_CAP, H5D_CHUNK_CACHE_W0_DEFAULT),
           what + ": cannot size the chunk cache");
  return dapl;
}

H5Handle h5_open_read_only(const std::string& path) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  const std::string what = "data file '" + path + "'";
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw UserError(what + ": no such file");
  if (std::filesystem::is_directory(status)) throw UserError(what + ": is a directory, not a file");
  if (access(path.c_str(), R_OK) != 0)
    throw UserError(what + ": cannot read it (" + std::strerror(errno) + ")");
  // 0 means "readable, but no HDF5 signature"; < 0 (cannot tell) falls through to H5Fopen's own error.
  if (H5Fis_hdf5(path.c_str()) == 0) throw UserError(what + ": not an HDF5 file");
  H5Handle fapl = H5Handle::plist(h5_check(H5Pcreate(H5P_FILE_ACCESS), what + ": H5Pcreate failed"));
  disable_file_locking(fapl.id(), what);
  return H5Handle::file(
      h5_check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id()), what + ": cannot open it"));
}

// A list of variable-length strings (h5py writes a list of str so), or {} when absent.
std::vector<std::string> h5_string_list_attr(hid_t obj, const char* name) {
  std::vector<std::string> out;
  if (H5Aexists(obj, name) <= 0) return out;
  H5Handle a = H5Handle::attr(H5Aopen(obj, name, H5P_DEFAULT));
  H5Handle ft = H5Handle::type(H5Aget_type(a.id()));
  H5Handle s = H5Handle::space(H5Aget_space(a.id()));
  if (!a.valid() || !ft.valid() || H5Tget_class(ft.id()) != H5T_STRING || H5Tis_variable_str(ft.id()) <= 0)
    return out;
  const hssize_t n = H5Sget_simple_extent_npoints(s.id());
  H5Handle mt = H5Handle::type(H5Tcopy(H5T_C_S1));
  H5Tset_size(mt.id(), H5T_VARIABLE);
  H5Tset_cset(mt.id(), H5Tget_cset(ft.id()));  // HDF5 converts no character set into another
  std::vector<char*> v(static_cast<size_t>(std::max<hssize_t>(n, 0)), nullptr);
  if (n > 0 && H5Aread(a.id(), mt.id(), v.data()) >= 0) {
    for (char* p : v) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(mt.id(), s.id(), H5P_DEFAULT, v.data());
  }
  return out;
}

}  // namespace hpc::data
