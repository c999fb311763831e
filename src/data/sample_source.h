// Where the bytes of one dataset (x or y of a split) come from.
//
// H5Dataset validates a file and converts samples; a SampleSource only hands
// out a pointer to row i (one sample, already in native byte order). Keeping
// that seam small lets the reading strategy change without touching
// validation or conversion: today the whole dataset is read into host memory
// at open (right for MNIST/CIFAR-sized data); mmap of contiguous datasets
// (H5Dget_offset) and hyperslab reads for chunked/compressed ones slot in as
// further implementations.
//
// row() is const and touches no HDF5 state, so loader threads may call it
// concurrently.
#pragma once

#include <hdf5.h>

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
  // The row_bytes() bytes of sample i (0 <= i < rows()), valid while the source lives.
  virtual const std::byte* row(int64_t i) const = 0;

 private:
  int64_t rows_, row_bytes_;
};

// Reads all of `dataset` into host memory as `mem_type` (HDF5 converts the
// byte order). rows × row_bytes must match the dataset's size in mem_type.
// Throws UserError naming `what` when the read fails or the data cannot fit
// in this machine's memory.
std::unique_ptr<SampleSource> load_into_memory(hid_t dataset, hid_t mem_type, int64_t rows,
                                               int64_t row_bytes, const std::string& what);

}  // namespace hpc::data
