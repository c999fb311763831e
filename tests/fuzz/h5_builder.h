// Structure-aware HDF5 for the fuzz targets: fuzz bytes → a real HDF5 file.
//
// libhdf5 is not robust against arbitrary bytes (a crash inside it is its
// bug, not ours, and would drown the run), so the h5dataset and checkpoint
// targets never hand it random bytes. They decode the input into choices
// (object kinds, types, shapes, layouts, values, attributes) and write a
// well-formed file with the HDF5 API; what is fuzzed is OUR logic on files
// that are valid HDF5 but may be anything else: missing or extra objects,
// wrong types and ranks, zero or mismatched lengths, NaN/Inf/huge values,
// big-endian or chunked/compressed/compact storage, attributes of the wrong
// type or shape. A failed HDF5 call while building (e.g. a compact dataset
// too big for its header) just leaves that object out.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "data/h5_handle.h"
#include "fuzz_util.h"

namespace hpc::fuzz {

// The file types a dataset or attribute may get.
inline hid_t pick_type(ByteReader& in) {
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_STD_U8LE, H5T_STD_I32LE, H5T_IEEE_F64LE, H5T_IEEE_F32BE,
                         H5T_STD_I32BE,  H5T_STD_I8LE, H5T_STD_U32LE, H5T_STD_I64LE};
  return types[in.below(sizeof types / sizeof types[0])];
}

// Element values for `count` elements of file type `type`: raw bit patterns
// (any float, any integer) or small integers converted by HDF5 (valid class
// ids, plain pixel values).
inline void write_values(ByteReader& in, hid_t dset, hid_t type, hsize_t count) {
  if (count == 0) return;
  if (in.flag()) {
    std::vector<uint8_t> raw(count * H5Tget_size(type));
    for (uint8_t& b : raw) b = in.u8();
    H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data());
  } else {
    const int modulus = 1 + in.below(16);
    std::vector<int32_t> v(count);
    for (int32_t& x : v) x = in.u8() % modulus;
    H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  }
}

// A scalar number, a number of another type, a list, a string, or nothing.
inline void maybe_attr(ByteReader& in, hid_t obj, const char* name) {
  const int kind = in.below(6);
  if (kind == 0) return;
  data::H5Handle space;
  data::H5Handle type;
  if (kind == 4) {
    type = data::H5Handle::type(H5Tcopy(H5T_C_S1));
    H5Tset_size(type.id(), 4);
    space = data::H5Handle::space(H5Screate(H5S_SCALAR));
    const char text[4] = {'1', '0', 0, 0};
    data::H5Handle a =
        data::H5Handle::attr(H5Acreate2(obj, name, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT));
    if (a.valid()) H5Awrite(a.id(), type.id(), text);
    return;
  }
  const hsize_t n = kind == 3 ? 2 : 1;
  space = data::H5Handle::space(kind == 3 ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR));
  const hid_t ftype = kind == 2 ? H5T_STD_I64LE : H5T_IEEE_F64LE;
  data::H5Handle a = data::H5Handle::attr(H5Acreate2(obj, name, ftype, space.id(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid()) return;
  if (kind == 2) {
    const int64_t v[2] = {in.interesting_int(), 1};
    H5Awrite(a.id(), H5T_NATIVE_INT64, v);
  } else {
    const double v[2] = {in.interesting_double(), 1};
    H5Awrite(a.id(), H5T_NATIVE_DOUBLE, v);
  }
}

// One dataset `name` (parents created) with fuzz-chosen type, shape, layout, values and attributes.
// `leading` is the preferred first dimension (so x and y often agree).
inline void make_dataset(ByteReader& in, hid_t file, const std::string& name, hsize_t leading,
                         const std::vector<const char*>& attrs) {
  const hid_t type = pick_type(in);
  const int rank = static_cast<int>(in.below(5));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  hsize_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const uint8_t c = in.u8();
    dims[static_cast<size_t>(d)] = d == 0 && c < 160 ? leading : c % 7;
    if (c >= 250) dims[static_cast<size_t>(d)] = 300;
    if (c == 249)
      dims[static_cast<size_t>(d)] = hsize_t(1) << 40;  // a claim no file backs (chunked, unwritten)
    count = count > (1 << 16) ? count : count * dims[static_cast<size_t>(d)];
  }
  const bool huge = count > (1 << 16);
  data::H5Handle space =
      data::H5Handle::space(rank ? H5Screate_simple(rank, dims.data(), nullptr) : H5Screate(H5S_SCALAR));
  data::H5Handle lcpl = data::H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  data::H5Handle dcpl = data::H5Handle::plist(H5Pcreate(H5P_DATASET_CREATE));
  const int layout = huge ? 1 : in.below(4);
  if (layout == 1 || layout == 2) {
    // At most 4 chunks per dimension (a file of 65536 one-element chunks is slow to write, not
    // interesting); the huge claim gets chunks of one row that are never written.
    std::vector<hsize_t> chunk(dims.size());
    for (size_t d = 0; d < dims.size(); ++d)
      chunk[d] = huge ? 1 : std::max<hsize_t>(1, dims[d] / (1 + in.u8() % 4));
    H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER);
    if (rank) H5Pset_chunk(dcpl.id(), rank, chunk.data());
    if (rank && layout == 2) H5Pset_deflate(dcpl.id(), 1);
  } else if (layout == 3) {
    H5Pset_layout(dcpl.id(), H5D_COMPACT);
  }
  data::H5Handle d = data::H5Handle::dataset(
      H5Dcreate2(file, name.c_str(), type, space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT));
  if (!d.valid() && !huge)  // e.g. compact and too big: plain contiguous instead
    d = data::H5Handle::dataset(
        H5Dcreate2(file, name.c_str(), type, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
  if (!d.valid()) return;
  if (!huge && in.below(4) != 0) write_values(in, d.id(), type, count);  // else never written: fill values
  for (const char* a : attrs) maybe_attr(in, d.id(), a);
}

// A fresh HDF5 file at `path` (truncated); invalid handle when it cannot be created.
inline data::H5Handle create_file(const std::string& path) {
  return data::H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
}

}  // namespace hpc::fuzz
