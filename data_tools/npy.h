// Reader for NumPy .npy files (format versions 1, 2 and 3).
//
// A .npy file is the magic "\x93NUMPY", a version (major, minor), a header
// length (uint16 little-endian in version 1, uint32 in 2 and 3), then a
// Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
// padded with spaces, then the elements in C order. This reads the header,
// checks that the file holds the promised bytes, and serves rows converted
// to the dtype hpctrain stores (streamed with pread: arrays larger than
// memory are fine). Only plain numeric dtypes (bool, int, uint, float of
// 1-8 bytes, either byte order) in C order are accepted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pack.h"

namespace hpc::data_tools {

struct NpyHeader {
  char kind = 'f';    // 'b' bool, 'i' int, 'u' uint, 'f' float
  int item_size = 4;  // bytes per element
  bool big_endian = false;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;  // where the elements start
  std::string descr;        // as written, for messages: "<f4"
};

// Throws UserError "PATH: …" on a wrong magic, an unknown version, a
// malformed or unsupported header, Fortran order, or a truncated file.
NpyHeader read_npy_header(const std::string& path);

// Rows of the array as `to` (U8, I32 or F32). `role` says what the array is
// for messages ("x", "y"). Conversions: uint8 → U8 unchanged; any numeric →
// F32 (float64 rounded); integers → I32 (values that do not fit are an
// error naming the row). A 1-D x becomes N × 1.
Array npy_array(const std::string& path, const NpyHeader& h, DType to);

}  // namespace hpc::data_tools
