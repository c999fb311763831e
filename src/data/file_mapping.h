// FileMapping: a read-only memory mapping of a byte range of a file (RAII).
//
// mmap wants a page-aligned file offset, but a dataset starts wherever HDF5
// put it (4 KiB-aligned in files hpcdata writes, anywhere in files h5py
// writes). So the mapping starts at the page boundary below `offset` and
// data() points `offset % page` bytes into it. The file descriptor is closed
// right after mmap: the mapping keeps the file alive. munmap runs in the
// destructor, which never throws.
//
// A mapping reads what is on disk at the time of access: a file truncated or
// rewritten in place while training runs makes the process fault (SIGBUS).
// hpcdata never rewrites in place (temp file + rename), so replacing a
// dataset file under a running job is safe; truncating it is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hpc::data {

class FileMapping {
 public:
  // Maps bytes [offset, offset + length) of `path` (length > 0). Throws
  // UserError starting with `what` when the file cannot be opened or mapped,
  // or is shorter than offset + length (a truncated file).
  FileMapping(const std::string& path, uint64_t offset, uint64_t length, const std::string& what);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  const std::byte* data() const { return data_; }
  uint64_t length() const { return length_; }

 private:
  void* base_ = nullptr;  // what mmap returned (page-aligned)
  size_t mapped_ = 0;     // bytes mapped from base_
  const std::byte* data_ = nullptr;
  uint64_t length_ = 0;
};

}  // namespace hpc::data
