// RAII for HDF5 identifiers, and the one way HDF5 failures become errors.
//
// Every hid_t the data code opens lives in an H5Handle, which closes it with
// the matching H5?close when it goes out of scope, so an exception thrown
// half-way through opening a file leaks nothing. Destructors never throw: a
// failed close is logged to stderr and otherwise ignored.
//
// HDF5 normally prints its whole error stack (a dozen lines per failure) to
// stderr. H5QuietErrors switches that off for a scope; h5_check then turns a
// failed call into ONE UserError line naming the file and dataset, plus the
// innermost HDF5 message (the one that says what was actually wrong, e.g.
// "truncated file: eof = 1000, stored_eof = 6000").
//
// h5_lock() serialises HDF5 across threads: see its comment.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hpc::data {

class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  H5Handle() = default;
  H5Handle(hid_t id, Closer close, const char* kind) : id_(id), close_(close), kind_(kind) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept { *this = std::move(o); }
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
      kind_ = o.kind_;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and returns the close call's status (< 0: failed), e.g. to
  // learn whether a written file was flushed before renaming it.
  herr_t close() noexcept;
  // Closes now, logging a failure. Never throws.
  void reset() noexcept;

  // One factory per kind of identifier, each pairing it with its close call.
  static H5Handle file(hid_t id) { return {id, H5Fclose, "file"}; }
  static H5Handle group(hid_t id) { return {id, H5Gclose, "group"}; }
  static H5Handle dataset(hid_t id) { return {id, H5Dclose, "dataset"}; }
  static H5Handle space(hid_t id) { return {id, H5Sclose, "dataspace"}; }
  static H5Handle type(hid_t id) { return {id, H5Tclose, "datatype"}; }
  static H5Handle plist(hid_t id) { return {id, H5Pclose, "property list"}; }
  static H5Handle attr(hid_t id) { return {id, H5Aclose, "attribute"}; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
  const char* kind_ = "";
};

// Turns off HDF5's automatic error-stack printing for the lifetime of the
// object and restores the previous handler afterwards.
class H5QuietErrors {
 public:
  H5QuietErrors();
  ~H5QuietErrors();
  H5QuietErrors(const H5QuietErrors&) = delete;
  H5QuietErrors& operator=(const H5QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// HDF5 keeps library-wide state (open objects, the error stack, the
// error-printing switch). Builds without --enable-threadsafe, common in
// cluster modules, must never be entered by two threads at once, and even the
// thread-safe build keeps the printing switch per thread. So every HDF5 call
// that may run while loader threads read (the H5Dread fallback, dataset
// open/close, checkpoint writes) holds this one process-wide lock. It is
// recursive so that a locked function may call another that locks.
// (A mutex for the library's own global state is the one global here.)
[[nodiscard]] std::unique_lock<std::recursive_mutex> h5_lock();

// Turns HDF5 file locking off on a file-access property list: with
// H5Pset_file_locking where the library has it (1.10.7+, 1.12.1+), else by
// honouring HDF5_USE_FILE_LOCKING (set to FALSE unless the user set it).
void disable_file_locking(hid_t fapl, const std::string& what);

// Chunk cache of every dataset opened for reading: up to CHUNK_CACHE_CAP
// bytes of decompressed chunks (memory is used only for chunks actually
// read) in CHUNK_CACHE_SLOTS hash slots (prime; chunk i of a dataset with
// fewer chunks than slots never collides with another).
constexpr size_t CHUNK_CACHE_CAP = size_t(256) << 20;
constexpr size_t CHUNK_CACHE_SLOTS = 100003;

// A dataset access property list for reading data files: the chunk cache
// above, and external links that open their target read-only with locking
// off too (by default HDF5 opens it with locking on, which fails on
// Lustre/NFS, and a later direct open of that file is then refused: "file
// locking flag values don't match"). HDF5 keeps one chunk cache per open
// dataset, sized by its first open: use this list for every open of a data
// file's datasets. Pass it to H5Dopen2 / H5Oopen; owned by the caller.
H5Handle h5_dataset_access(const std::string& what);

// Opens an existing HDF5 file read-only with file locking off (Lustre, GPFS
// and NFS often refuse locks, and readers never need them). Throws UserError
// "data file 'PATH': …" when it is missing, unreadable, not HDF5 or truncated.
H5Handle h5_open_read_only(const std::string& path);

// A datatype as a user would name it: "float32", "uint8", "int64", "string", …
std::string h5_type_name(hid_t type);

// An attribute holding a list of variable-length strings (as h5py writes a
// list of str), e.g. an image file's class names; {} when absent or another type.
std::vector<std::string> h5_string_list_attr(hid_t obj, const char* name);

// The innermost message of the current HDF5 error stack ("" when empty).
// Call it right after the failing call: the next HDF5 call clears the stack.
std::string h5_error_detail();

// Throws UserError("<what>: <innermost HDF5 message>").
[[noreturn]] void throw_h5_error(const std::string& what);

// Returns `result` when the HDF5 call succeeded (>= 0), else throws as above.
// Works for hid_t, herr_t and htri_t results alike.
template <typename R>
R h5_check(R result, const std::string& what) {
  if (result < 0) throw_h5_error(what);
  return result;
}

}  // namespace hpc::data
