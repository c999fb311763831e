// Host memory by the page (see host_pages.h).
#include "core/host_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hpc {

namespace {

size_t page_size() {
  static const auto size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// How far p lies past the start of its page.
size_t page_offset(const void* p) { return reinterpret_cast<uintptr_t>(p) % page_size(); }

}  // namespace

void release_zeroed(void* p, size_t bytes) {
  if (bytes == 0) return;
  const size_t page = page_size();
  char* const begin = static_cast<char*>(p);
  const size_t head = (page - page_offset(begin)) % page;  // bytes before the first whole page
  const size_t tail = page_offset(begin + bytes);          // bytes after the last whole page
  if (head + tail >= bytes) {                              // no whole page inside
    std::memset(begin, 0, bytes);
    return;
  }
  char* const inner = begin + head;
  const size_t inner_bytes = bytes - head - tail;
  std::memset(begin, 0, head);
  std::memset(inner + inner_bytes, 0, tail);
  // MADV_DONTNEED on private anonymous memory: the pages read as zero from now on. Should it ever
  // fail (it does not for such memory), the range is still zeroed, only not returned.
  if (madvise(inner, inner_bytes, MADV_DONTNEED) != 0) std::memset(inner, 0, inner_bytes);
}

void release_zeroed(const Tensor& t, int64_t begin, int64_t end) {
  HPC_ASSERT(t.device() == Device::CPU && begin >= 0 && end <= t.count(), "release_zeroed: not a host range");
  if (begin >= end) return;
  const size_t esize = dtype_size(t.dtype());
  release_zeroed(static_cast<char*>(t.raw()) + static_cast<size_t>(begin) * esize,
                 static_cast<size_t>(end - begin) * esize);
}

size_t resident_bytes(const void* p, size_t bytes) {
  if (bytes == 0) return 0;
  const size_t page = page_size();
  const size_t lead = page_offset(p);
  // mincore wants a page-aligned start: the page that holds p.
  void* const first = const_cast<char*>(static_cast<const char*>(p)) - lead;
  const size_t span = (lead + bytes + page - 1) / page * page;
  std::vector<unsigned char> in_core(span / page);
  HPC_ASSERT(mincore(first, span, in_core.data()) == 0, "mincore of a host buffer failed");
  size_t pages = 0;
  for (unsigned char c : in_core) pages += c & 1;
  return pages * page;
}

namespace {
// A "Name:   123 kB" line of /proc/self/status, in bytes (0 when absent).
size_t status_kib(const char* name) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  const size_t n = std::strlen(name);
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, name, n) == 0 && line[n] == ':') {
      kib = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kib * 1024;
}
}  // namespace

size_t rss_bytes() { return status_kib("VmRSS"); }
size_t peak_rss_bytes() { return status_kib("VmHWM"); }

void reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return;
  std::fputs("5", f);
  std::fclose(f);
}

}  // namespace hpc
