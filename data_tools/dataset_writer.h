// DatasetWriter: writes an hpctrain dataset file (docs/data.md "HDF5 layout")
// so that it can be memory-mapped and never exists half-written.
//
// - Datasets are contiguous (HDF5's default layout: no chunking, no filters),
//   little-endian, and the file is created with 4 KiB alignment, so every
//   dataset of 4 KiB or more starts on a page boundary and a reader can mmap
//   it at H5Dget_offset (smaller ones are mappable too, at an offset).
// - Everything goes to OUT.tmp-PID; commit() closes, fsyncs and renames it
//   over OUT. If commit() is never reached (an exception on any path), the
//   destructor removes the temp file, so a failure leaves no output at all.
// - The output location is checked in the constructor, before the caller
//   reads any input: an existing file without `force`, a missing or
//   unwritable directory fail in milliseconds.
// - A full disk or quota (ENOSPC, EDQUOT) at any write, the close or the
//   fsync is an IoError (exit 74) naming the output; other failures stay
//   UserErrors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/h5_handle.h"

namespace hpc::data_tools {

class DatasetWriter {
 public:
  DatasetWriter(std::string path, bool force);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Writes `name` (e.g. "/train/x", parent groups created) from host memory
  // holding shape.count() elements of `dtype` (U8, U16, I32 or F32) in native order.
  void write(const std::string& name, const void* data, DType dtype, const Shape& shape);
  // The same in pieces, for data larger than memory: create() the dataset
  // (shape[0] rows), then write_rows() every row exactly once, in any order.
  // `unsigned_in_file`: I32 values stored as uint32 (token ids of vocabularies
  // above 65,536; they are below 2^31, so the conversion is exact).
  void create(const std::string& name, DType dtype, const Shape& shape, bool unsigned_in_file = false);
  void write_rows(const std::string& name, int64_t first, int64_t count, const void* data);
  // Scalar attributes on a dataset written before.
  void set_attr(const std::string& dataset, const std::string& attr, double value);
  void set_attr(const std::string& dataset, const std::string& attr, int64_t value);
  void set_attr(const std::string& dataset, const std::string& attr, const std::string& value);
  // An attribute of several numbers (float64) or strings (variable-length, as h5py writes a list of str).
  void set_attr(const std::string& dataset, const std::string& attr, const std::vector<double>& values);
  void set_attr(const std::string& dataset, const std::string& attr, const std::vector<std::string>& values);
  // A 1-D int64 dataset (offsets into a byte dataset) from memory.
  void write_i64(const std::string& name, const std::vector<int64_t>& values);

  // Makes the file visible under its final name. Nothing may be written after.
  void commit();

  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;
  data::H5Handle file_;
  struct Open {
    data::H5Handle dataset;
    DType dtype;
    Shape shape;
  };
  std::map<std::string, Open> open_;  // datasets created and not yet closed (closed at commit)
  bool committed_ = false;
};

}  // namespace hpc::data_tools
