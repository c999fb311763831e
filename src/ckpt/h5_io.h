// Small typed HDF5 helpers for the checkpoint writer and reader.
//
// The writer stores integers as little-endian int64/uint64, strings as
// variable-length UTF-8 (h5py reads them as str) and tensors as contiguous
// float32/float64 datasets with a `crc32` attribute. The reader checks type
// and shape before it reads, so a damaged or foreign file becomes one
// UserError line "<what>: <name> …", never a crash or a silent misread.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/tensor.h"
#include "data/h5_handle.h"

namespace hpc::ckpt::h5 {

using data::H5Handle;

// CRC-32 (zlib) of a byte range, continuing from `crc`.
uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc = 0);

// ---- writing (errors: UserError "what: …") --------------------------------
H5Handle create_group(hid_t loc, const std::string& name, const std::string& what);
void write_attr(hid_t obj, const std::string& name, int64_t value, const std::string& what);
void write_attr_u64(hid_t obj, const std::string& name, uint64_t value, const std::string& what);
void write_attr(hid_t obj, const std::string& name, const std::string& value, const std::string& what);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values,
                const std::string& what);
// A contiguous dataset of `t` (F32 or F64) with shape `shape` and a crc32 attribute of its bytes.
void write_tensor(hid_t loc, const std::string& name, const Tensor& t, const Shape& shape,
                  const std::string& what);

// A float32 dataset of `shape` written piece by piece: write() takes consecutive elements in row-major
// order, from the start to the end, and keeps the CRC-32 of them; finish() adds the crc32 attribute.
class TensorWriter {
 public:
  TensorWriter(hid_t loc, const std::string& name, const Shape& shape, const std::string& what);
  // Elements [written(), written() + values.count()) of the flattened dataset (host float32).
  void write(const Tensor& values);
  int64_t written() const { return written_; }
  void finish();
  PayloadCrc crc() const { return {crc_, static_cast<uint64_t>(written_) * 4}; }

 private:
  std::string what_;
  std::vector<hsize_t> dims_;
  H5Handle dataset_;
  int64_t written_ = 0;
  uint32_t crc_ = 0;
};

// ---- reading (errors: UserError "what: name …") ----------------------------
bool has_attr(hid_t obj, const std::string& name);
int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& what);
uint64_t read_attr_u64(hid_t obj, const std::string& name, const std::string& what);
std::string read_attr_str(hid_t obj, const std::string& name, const std::string& what);
std::vector<int64_t> read_attr_i64s(hid_t obj, const std::string& name, const std::string& what);
// Reads `name` (float32 or float64 as `dtype`) and checks its element count
// (when expected_count ≥ 0) and its crc32 attribute.
Tensor read_tensor(hid_t loc, const std::string& name, DType dtype, int64_t expected_count,
                   const std::string& what);
// A float32 dataset read piece by piece, as flat elements in row-major order: the checkpoint's flat
// datasets streamed to their owners (ckpt/shard_stream.h) without one rank holding them whole.
class TensorReader {
 public:
  // Checks that `name` exists, is float32 and holds expected_count elements.
  TensorReader(hid_t loc, const std::string& name, int64_t expected_count, const std::string& what);
  int64_t count() const { return count_; }
  // Elements [begin, begin + out.count()) into out (host float32).
  void read(int64_t begin, const Tensor& out) const;
  // Reads it all, chunk_elems at a time, and checks its crc32 attribute (UserError "… is damaged");
  // returns the CRC-32 and byte length, for the file's checksum.
  PayloadCrc verify(int64_t chunk_elems) const;

 private:
  std::string what_;
  std::vector<hsize_t> dims_;
  H5Handle dataset_;
  int64_t count_ = 0;
};

// Names of the members of group `name`, in name order; empty when the group is absent.
std::vector<std::string> list_group(hid_t loc, const std::string& name, const std::string& what);

}  // namespace hpc::ckpt::h5
