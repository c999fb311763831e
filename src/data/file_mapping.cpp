// FileMapping (see the header).
#include "data/file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace hpc::data {

namespace {

// A dataset this small relative to RAM is worth reading ahead as a whole
// (MADV_WILLNEED starts asynchronous readahead): the first epoch then does
// not fault page by page. Larger ones are paged in as the sampler asks.
constexpr uint64_t WILLNEED_RAM_FRACTION = 4;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

FileMapping::FileMapping(const std::string& path, uint64_t offset, uint64_t length, const std::string& what)
    : length_(length) {
  HPC_ASSERT(length > 0, "FileMapping of zero bytes");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(what + ": cannot open " + path + " to map it (" + errno_text() + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    throw UserError(what + ": cannot stat " + path + " (" + err + ")");
  }
  if (uint64_t(st.st_size) < offset + length) {
    ::close(fd);
    throw UserError(what + ": truncated file: the data ends at byte " + std::to_string(offset + length) +
                    " but the file has " + std::to_string(st.st_size) + " bytes");
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset - offset % page;
  mapped_ = static_cast<size_t>(offset + length - start);
  base_ = ::mmap(nullptr, mapped_, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  const int map_errno = errno;
  ::close(fd);  // the mapping holds its own reference to the file
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    errno = map_errno;
    throw UserError(what + ": cannot memory-map " + path + " (" + errno_text() + ")");
  }
  data_ = static_cast<const std::byte*>(base_) + (offset - start);
  const double ram = double(::sysconf(_SC_PHYS_PAGES)) * double(page);
  if (double(mapped_) * WILLNEED_RAM_FRACTION <= ram) ::madvise(base_, mapped_, MADV_WILLNEED);
}

FileMapping::~FileMapping() {
  if (base_ && ::munmap(base_, mapped_) != 0)
    std::fprintf(stderr, "hpctrain: warning: munmap of a dataset failed (%s)\n", std::strerror(errno));
}

}  // namespace hpc::data
