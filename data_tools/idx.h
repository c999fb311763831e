// Reader for IDX files, the format of MNIST, EMNIST and Fashion-MNIST, and
// read_whole_file() for the other formats that may come gzipped.
//
// An IDX file is a 4-byte big-endian magic (0x00 0x00 TYPE RANK), RANK
// big-endian uint32 dimensions, then the elements row-major. Only TYPE 0x08
// (unsigned byte) is used by these datasets, so that is all this reads.
// Files may be plain or gzip-compressed: zlib's gzread passes plain files
// through unchanged, so one code path reads both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc::data_tools {

struct IdxArray {
  std::vector<int64_t> dims;  // dims[0] = number of records
  std::vector<uint8_t> data;  // product(dims) bytes
};

// Reads `path`, which must hold unsigned bytes of rank `rank` (magic
// 0x00000800 + rank). Throws UserError "PATH: …" on a wrong magic, a
// truncated or corrupt file (fewer bytes than the header promises) or an
// unreadable one. Trailing bytes after the promised data are ignored.
IdxArray read_idx_u8(const std::string& path, int rank);

// All bytes of `path`, gunzipped when it is gzip-compressed (zlib passes
// plain files through). Throws UserError "PATH: …" when it cannot be opened
// or the gzip data is corrupt or cut off. For inputs of a few hundred MB
// (CIFAR-10 batches, CSV files) that are parsed as a whole.
std::vector<uint8_t> read_whole_file(const std::string& path);

// DIR/NAME if it exists, else DIR/NAME.gz; throws UserError naming both when neither does.
std::string find_idx_file(const std::string& dir, const std::string& name);

}  // namespace hpc::data_tools
