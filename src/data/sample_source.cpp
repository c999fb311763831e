// The in-memory SampleSource: one H5Dread of the whole dataset at open.
#include "data/sample_source.h"

#include <unistd.h>

#include <cstdio>
#include <new>

#include "core/error.h"
#include "data/h5_handle.h"

namespace hpc::data {

namespace {

class MemorySource : public SampleSource {
 public:
  MemorySource(int64_t rows, int64_t row_bytes, std::unique_ptr<std::byte[]> bytes)
      : SampleSource(rows, row_bytes), bytes_(std::move(bytes)) {}
  const std::byte* row(int64_t i) const override { return bytes_.get() + i * row_bytes(); }

 private:
  std::unique_ptr<std::byte[]> bytes_;
};

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", bytes / double(1ull << 30));
  return s;
}

}  // namespace

std::unique_ptr<SampleSource> load_into_memory(hid_t dataset, hid_t mem_type, int64_t rows,
                                               int64_t row_bytes, const std::string& what) {
  HPC_ASSERT(rows > 0 && row_bytes > 0, "load_into_memory of an empty dataset");
  if (row_bytes > INT64_MAX / rows) throw UserError(what + ": its size overflows 64 bits");
  const int64_t bytes = rows * row_bytes;
  // Linux overcommits, so a too-large allocation would "succeed" and the OOM
  // killer would strike later without a word; compare with RAM up front.
  const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (ram > 0 && double(bytes) > ram)
    throw UserError(what + ": needs " + gib(double(bytes)) + " in memory, this machine has " + gib(ram));
  std::unique_ptr<std::byte[]> buf;
  try {
    buf.reset(new std::byte[static_cast<size_t>(bytes)]);
  } catch (const std::bad_alloc&) {
    throw UserError(what + ": cannot allocate " + gib(double(bytes)) + " to load it");
  }
  h5_check(H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.get()), what + ": read failed");
  return std::make_unique<MemorySource>(rows, row_bytes, std::move(buf));
}

}  // namespace hpc::data
