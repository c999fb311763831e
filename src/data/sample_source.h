// Where the bytes of one dataset (x or y of a split) come from.
//
// H5Dataset validates a file and converts samples; a SampleSource hands out
// raw rows (one sample each, in native byte order). There are two kinds:
//
// - Mapped: a contiguous, unfiltered dataset whose file type is the native
//   type is memory-mapped at H5Dget_offset. data() is the address of row 0,
//   so reading a sample is a memory access: no HDF5 call, no lock, any
//   number of threads. The page cache is shared by every rank on a node and
//   a dataset larger than RAM is paged in on demand.
// - Read: anything else (chunked, compressed, other byte order, compact or
//   external storage) is read with H5Dread of hyperslabs (the requested
//   rows sorted into runs of consecutive rows) under h5_lock(). Datasets are opened
//   with a chunk cache of up to CHUNK_CACHE_CAP bytes (h5_dataset_access), so
//   a compressed dataset smaller than that is decompressed once and then
//   served from the cache; larger ones decompress a chunk per cache miss.
//   Correct, but serial and slower: `hpcdata repack` turns such a file into
//   a mappable one.
//
// Nothing here reads a whole dataset into memory: validation and repack
// scan in bounded blocks with read_range(). All methods are thread-safe.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hpc::data {

class SampleSource {
 public:
  SampleSource(int64_t rows, int64_t row_bytes) : rows_(rows), row_bytes_(row_bytes) {}
  virtual ~SampleSource() = default;
  SampleSource(const SampleSource&) = delete;
  SampleSource& operator=(const SampleSource&) = delete;

  int64_t rows() const { return rows_; }
  int64_t row_bytes() const { return row_bytes_; }
  // The address of row 0 when the rows are memory-mapped (row i is at
  // data() + i·row_bytes()), else nullptr: then use read_rows().
  virtual const std::byte* data() const { return nullptr; }
  // Copies rows idx[0..n) (any order, repeats allowed) to out, one after the other.
  virtual void read_rows(const int64_t* idx, int64_t n, std::byte* out) const = 0;
  // Copies rows [first, first + n) to out.
  virtual void read_range(int64_t first, int64_t n, std::byte* out) const = 0;
  // Empty when mapped; else why not, for the user: "chunked, filters: deflate".
  virtual std::string why_not_mapped() const { return ""; }

 private:
  int64_t rows_, row_bytes_;
};

// Whether a dataset can be memory-mapped as `mem_type`, and where.
struct MmapCheck {
  haddr_t offset = HADDR_UNDEF;  // byte offset in `file` (valid when why_not is empty)
  std::string file;     // the file that holds the data (differs from the opened one behind an external link)
  std::string why_not;  // "" = mappable; else the reason, e.g. "chunked, filters: deflate"
};
// Contiguous, allocated, not external, and the file type equals mem_type
// (same class, size and byte order). Pass mem_type < 0 to compare with the
// native type of the dataset's own class (what `hpcdata inspect` reports).
MmapCheck check_mmap(hid_t dataset, hid_t mem_type = H5I_INVALID_HID);

struct SourceRequest {
  std::string name;     // "/train/x": reopened by name for H5Dread with its own chunk cache
  hid_t mem_type = -1;  // the native type rows are wanted in (H5T_NATIVE_FLOAT, …)
  int64_t rows = 0, row_bytes = 0;
  bool allow_mmap = true;  // false: always the Read kind (tests and benchmarks compare both)
  std::string what;        // "data file 'PATH': /train/x", the prefix of every error
};

// Throws UserError naming `what` when the dataset's data was never written
// (contiguous and unallocated) or only partly (chunked, fewer chunks stored
// than its shape needs): HDF5 would read the rest as fill values, and a file
// of a few bytes could claim rows that validation would scan for days.
void check_written(hid_t dataset, const std::string& what);

// Opens `request.name` in `file` as a Mapped source when check_mmap allows
// it, else as a Read source. Throws UserError naming request.what, e.g. when
// the data lies past the end of a truncated file or was never written.
std::unique_ptr<SampleSource> open_source(hid_t file, const SourceRequest& request);

// "rows 40 to 103" for a run, "64 samples (rows 12 to 9987)" for a gather of
// scattered indices: the span a read error names.
std::string row_span(const int64_t* idx, int64_t n);
// A read of `rows` failed with `err`: IoError (exit 74) "<what>: reading <rows>
// failed: Input/output error (EIO)" when err is set, else UserError with HDF5's `detail`.
[[noreturn]] void throw_read_error(const std::string& what, const std::string& rows, int err,
                                   const std::string& detail = "");

// Calls fn(rows, first, count) over rows [first, first + n) in blocks of
// about `block_bytes` (mapped: pointers into the mapping; else a buffer).
template <typename Fn>
void scan_rows(const SampleSource& src, int64_t first, int64_t n, Fn&& fn, int64_t block_bytes = 4 << 20);

// ---- implementation of the template

template <typename Fn>
void scan_rows(const SampleSource& src, int64_t first, int64_t n, Fn&& fn, int64_t block_bytes) {
  const int64_t block = block_bytes / src.row_bytes() > 0 ? block_bytes / src.row_bytes() : 1;
  std::unique_ptr<std::byte[]> buf;
  if (!src.data()) buf.reset(new std::byte[static_cast<size_t>(std::min(block, n) * src.row_bytes())]);
  for (int64_t at = first; at < first + n; at += block) {
    const int64_t count = std::min(block, first + n - at);
    if (src.data()) {
      fn(src.data() + at * src.row_bytes(), at, count);
    } else {
      src.read_range(at, count, buf.get());
      fn(static_cast<const std::byte*>(buf.get()), at, count);
    }
  }
}

}  // namespace hpc::data
