// IDX reading through zlib: header checks first, then the data in bounded
// chunks, so a corrupt header promising terabytes fails as "truncated" after
// reading what is really there instead of allocating the promise up front.
#include "idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace hpc::data_tools {

namespace {

constexpr uint32_t IDX_UBYTE = 0x08;
constexpr size_t CHUNK = 1 << 20;

class GzFile {
 public:
  explicit GzFile(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }

 private:
  gzFile f_;
};

std::string hex32(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

// Reads up to n bytes; returns how many were read. Throws on a zlib error,
// which is how a damaged or cut-off .gz shows up.
size_t read_some(const GzFile& f, uint8_t* out, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const unsigned want = static_cast<unsigned>(std::min(n - got, CHUNK));
    const int r = gzread(f.get(), out + got, want);
    if (r < 0 || (r == 0 && got < n)) {
      int code = Z_OK;
      const char* msg = gzerror(f.get(), &code);
      if (code != Z_OK && code != Z_STREAM_END) {
        std::string detail = code == Z_ERRNO ? std::strerror(errno) : msg;
        // zlib's message starts with the path again
        if (detail.compare(0, path.size() + 2, path + ": ") == 0) detail.erase(0, path.size() + 2);
        throw UserError(path + ": corrupt or truncated gzip data (" + detail + ")");
      }
      if (r <= 0) break;
    }
    got += static_cast<size_t>(r);
  }
  return got;
}

uint32_t big_endian32(const uint8_t* b) {
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

}  // namespace

IdxArray read_idx_u8(const std::string& path, int rank) {
  GzFile f(path);
  if (!f.get()) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");

  uint8_t head[4];
  if (read_some(f, head, 4, path) < 4) throw UserError(path + ": too short to be an IDX file");
  const uint32_t magic = big_endian32(head);
  const uint32_t expected = IDX_UBYTE << 8 | static_cast<uint32_t>(rank);
  if (magic != expected)
    throw UserError(path + ": wrong IDX magic " + hex32(magic) + " (expected " + hex32(expected) + ", " +
                    (rank == 1 ? "a label file" : "an image file") + ")");

  IdxArray a;
  uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    uint8_t d[4];
    if (read_some(f, d, 4, path) < 4) throw UserError(path + ": truncated IDX header");
    a.dims.push_back(big_endian32(d));
    total *= a.dims.back();  // ≤ (2³²)³ only if a file lies; the read below catches that.
    if (total > (uint64_t(1) << 40)) throw UserError(path + ": IDX header promises more than 1 TiB");
  }

  // Grow as data arrives, never beyond what was read plus one chunk.
  while (a.data.size() < total) {
    const size_t old = a.data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(total - old, 16 * CHUNK));
    a.data.resize(old + want);
    const size_t got = read_some(f, a.data.data() + old, want, path);
    if (got < want)
      throw UserError(path + ": truncated: the header promises " + std::to_string(total) +
                      " bytes of data, the file holds " + std::to_string(old + got));
  }
  return a;
}

std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(path + ": is a directory, not a file");
  GzFile f(path);
  if (!f.get()) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<uint8_t> data;
  for (;;) {
    // Doubling from 64 KiB up to 16 MiB steps: a small file costs no 16 MiB buffer.
    const size_t old = data.size(), want = std::clamp<size_t>(old, size_t(64) << 10, 16 * CHUNK);
    data.resize(old + want);
    const size_t got = read_some(f, data.data() + old, want, path);
    data.resize(old + got);
    if (got < want) return data;
  }
}

std::string find_idx_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path plain = fs::path(dir) / name, gz = fs::path(dir) / (name + ".gz");
  if (fs::is_regular_file(plain, ec)) return plain.string();
  if (fs::is_regular_file(gz, ec)) return gz.string();
  throw UserError(dir + ": missing " + name + " (or " + name + ".gz)");
}

}  // namespace hpc::data_tools
