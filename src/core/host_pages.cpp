// Host memory by the page (see host_pages.h).
#include "core/host_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hpc {

namespace {

uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

void release_zeroed(void* p, size_t bytes) {
  if (bytes == 0) return;
  const uintptr_t page = page_size();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  const uintptr_t inner_begin = (begin + page - 1) / page * page, inner_end = end / page * page;
  if (inner_begin >= inner_end) {  // no whole page inside
    std::memset(p, 0, bytes);
    return;
  }
  std::memset(p, 0, inner_begin - begin);
  std::memset(reinterpret_cast<void*>(inner_end), 0, end - inner_end);
  // MADV_DONTNEED on private anonymous memory: the pages read as zero from now on. Should it ever
  // fail (it does not for such memory), the range is still zeroed, only not returned.
  if (madvise(reinterpret_cast<void*>(inner_begin), inner_end - inner_begin, MADV_DONTNEED) != 0)
    std::memset(reinterpret_cast<void*>(inner_begin), 0, inner_end - inner_begin);
}

size_t resident_bytes(const void* p, size_t bytes) {
  if (bytes == 0) return 0;
  const uintptr_t page = page_size();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  std::vector<unsigned char> in_core((end - begin) / page);
  HPC_ASSERT(mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()) == 0,
             "mincore of a host buffer failed");
  size_t pages = 0;
  for (unsigned char c : in_core) pages += c & 1;
  return pages * page;
}

}  // namespace hpc
