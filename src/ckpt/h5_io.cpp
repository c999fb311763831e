// Typed HDF5 helpers for checkpoints (see h5_io.h).
#include "ckpt/h5_io.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace hpc::ckpt::h5 {

using data::h5_check;

uint32_t crc32_bytes(const void* data, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

namespace {

H5Handle scalar_space(const std::string& what) {
  return H5Handle::space(h5_check(H5Screate(H5S_SCALAR), what));
}

H5Handle utf8_string_type(const std::string& what) {
  H5Handle t = H5Handle::type(h5_check(H5Tcopy(H5T_C_S1), what));
  h5_check(H5Tset_size(t.id(), H5T_VARIABLE), what);
  h5_check(H5Tset_cset(t.id(), H5T_CSET_UTF8), what);
  return t;
}

H5Handle open_attr(hid_t obj, const std::string& name, const std::string& what) {
  const htri_t exists = H5Aexists(obj, name.c_str());
  if (exists <= 0) throw UserError(what + ": attribute '" + name + "' is missing");
  return H5Handle::attr(
      h5_check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), what + ": attribute '" + name + "'"));
}

// The attribute must hold exactly one integer (any width or sign: HDF5 converts on read).
void check_integer_scalar(const H5Handle& a, const std::string& name, const std::string& what) {
  H5Handle type = H5Handle::type(h5_check(H5Aget_type(a.id()), what));
  H5Handle space = H5Handle::space(h5_check(H5Aget_space(a.id()), what));
  if (H5Tget_class(type.id()) != H5T_INTEGER || H5Sget_simple_extent_npoints(space.id()) != 1)
    throw UserError(what + ": attribute '" + name + "' is " + data::h5_type_name(type.id()) +
                    ", expected one integer");
}

}  // namespace

H5Handle create_group(hid_t loc, const std::string& name, const std::string& what) {
  return H5Handle::group(h5_check(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                  what + ": cannot create group " + name));
}

void write_attr(hid_t obj, const std::string& name, int64_t value, const std::string& what) {
  const std::string w = what + ": attribute " + name;
  H5Handle space = scalar_space(w);
  H5Handle a = H5Handle::attr(
      h5_check(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), w));
  h5_check(H5Awrite(a.id(), H5T_NATIVE_INT64, &value), w);
}

void write_attr_u64(hid_t obj, const std::string& name, uint64_t value, const std::string& what) {
  const std::string w = what + ": attribute " + name;
  H5Handle space = scalar_space(w);
  H5Handle a = H5Handle::attr(
      h5_check(H5Acreate2(obj, name.c_str(), H5T_STD_U64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), w));
  h5_check(H5Awrite(a.id(), H5T_NATIVE_UINT64, &value), w);
}

void write_attr(hid_t obj, const std::string& name, const std::string& value, const std::string& what) {
  const std::string w = what + ": attribute " + name;
  H5Handle type = utf8_string_type(w);
  H5Handle space = scalar_space(w);
  H5Handle a = H5Handle::attr(
      h5_check(H5Acreate2(obj, name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), w));
  const char* p = value.c_str();
  h5_check(H5Awrite(a.id(), type.id(), &p), w);
}

void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values,
                const std::string& what) {
  const std::string w = what + ": attribute " + name;
  hsize_t n = values.size();
  // A zero-length simple dataspace is not allowed for attributes: an empty list is a null dataspace.
  H5Handle space = H5Handle::space(h5_check(n ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_NULL), w));
  H5Handle a = H5Handle::attr(
      h5_check(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), w));
  if (n) h5_check(H5Awrite(a.id(), H5T_NATIVE_INT64, values.data()), w);
}

void write_tensor(hid_t loc, const std::string& name, const Tensor& t, const Shape& shape,
                  const std::string& what) {
  const std::string w = what + ": dataset " + name;
  HPC_ASSERT(t.dtype() == DType::F32 || t.dtype() == DType::F64, "checkpoint tensors are float32 or float64");
  HPC_ASSERT(shape.count() == t.count(), "checkpoint tensor shape does not match its element count");
  // A scalar parameter is stored as [1]. (Built in one go: gcc 12 warns falsely, -Wfree-nonheap-object,
  // on a push_back into a vector constructed from an empty range.)
  const std::vector<hsize_t> dims = shape.dims().empty()
                                        ? std::vector<hsize_t>{1}
                                        : std::vector<hsize_t>(shape.dims().begin(), shape.dims().end());
  H5Handle space =
      H5Handle::space(h5_check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), w));
  H5Handle lcpl = H5Handle::plist(h5_check(H5Pcreate(H5P_LINK_CREATE), w));
  h5_check(H5Pset_create_intermediate_group(lcpl.id(), 1), w);
  const bool f32 = t.dtype() == DType::F32;
  H5Handle d = H5Handle::dataset(h5_check(H5Dcreate2(loc, name.c_str(), f32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE,
                                                     space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT),
                                          w));
  if (t.count() > 0)
    h5_check(
        H5Dwrite(d.id(), f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()),
        w);
  write_attr(d.id(), "crc32", static_cast<int64_t>(crc32_bytes(t.raw(), t.num_bytes())), w);
}

namespace {

// Adds to `space`'s selection the elements [a, b) of the row-major array of dims[d…] whose outer
// coordinates are start[0…d): at most two partial rows, recursively, and one block of whole rows.
void select_run(hid_t space, const std::vector<hsize_t>& dims, size_t d, std::vector<hsize_t>& start,
                hsize_t a, hsize_t b, bool& first, const std::string& what) {
  if (a >= b) return;
  hsize_t inner = 1;
  for (size_t i = d + 1; i < dims.size(); ++i) inner *= dims[i];
  auto block = [&](hsize_t from, hsize_t rows) {  // rows [from, from + rows) of dimension d, whole inside
    std::vector<hsize_t> at = start, count(dims.size(), 1);
    at[d] = from;
    count[d] = rows;
    for (size_t i = d + 1; i < dims.size(); ++i) at[i] = 0, count[i] = dims[i];
    h5_check(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, at.data(), nullptr,
                                 count.data(), nullptr),
             what);
    first = false;
  };
  auto part = [&](hsize_t row, hsize_t from, hsize_t to) {  // a partial row
    start[d] = row;
    select_run(space, dims, d + 1, start, from, to, first, what);
  };
  const hsize_t r0 = a / inner, r1 = b / inner;  // the rows holding a and b
  if (r0 == r1) return part(r0, a % inner, b % inner);
  hsize_t first_whole = r0;
  if (a % inner != 0) {
    part(r0, a % inner, inner);
    first_whole = r0 + 1;
  }
  if (r1 > first_whole) block(first_whole, r1 - first_whole);
  if (b % inner != 0) part(r1, 0, b % inner);
}

// The dataset's selection of its flat elements [begin, begin + n) (row-major) and the memory space of
// n contiguous values: what a piece-by-piece read or write passes to H5Dread / H5Dwrite.
struct Selection {
  H5Handle file, memory;
};
Selection select_elements(hid_t dataset, const std::vector<hsize_t>& dims, int64_t begin, int64_t n,
                          const std::string& what) {
  Selection at{H5Handle::space(h5_check(H5Dget_space(dataset), what)), H5Handle()};
  std::vector<hsize_t> start(dims.size(), 0);
  bool first = true;
  const auto from = static_cast<hsize_t>(begin), count = static_cast<hsize_t>(n);
  select_run(at.file.id(), dims, 0, start, from, from + count, first, what);
  at.memory = H5Handle::space(h5_check(H5Screate_simple(1, &count, nullptr), what));
  return at;
}

}  // namespace

TensorWriter::TensorWriter(hid_t loc, const std::string& name, const Shape& shape, const std::string& what)
    : what_(what + ": dataset " + name),
      dims_(shape.dims().empty() ? std::vector<hsize_t>{1}
                                 : std::vector<hsize_t>(shape.dims().begin(), shape.dims().end())) {
  H5Handle space = H5Handle::space(
      h5_check(H5Screate_simple(static_cast<int>(dims_.size()), dims_.data(), nullptr), what_));
  H5Handle lcpl = H5Handle::plist(h5_check(H5Pcreate(H5P_LINK_CREATE), what_));
  h5_check(H5Pset_create_intermediate_group(lcpl.id(), 1), what_);
  dataset_ = H5Handle::dataset(h5_check(
      H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT), what_));
}

void TensorWriter::write(const Tensor& values) {
  HPC_ASSERT(values.dtype() == DType::F32 && values.device() == Device::CPU,
             "checkpoint pieces are host float32");
  if (values.count() == 0) return;
  const Selection at = select_elements(dataset_.id(), dims_, written_, values.count(), what_);
  h5_check(H5Dwrite(dataset_.id(), H5T_NATIVE_FLOAT, at.memory.id(), at.file.id(), H5P_DEFAULT, values.raw()),
           what_);
  crc_ = crc32_bytes(values.raw(), values.num_bytes(), crc_);
  written_ += values.count();
}

void TensorWriter::finish() {
  hsize_t n = 1;
  for (hsize_t d : dims_) n *= d;
  HPC_ASSERT(static_cast<hsize_t>(written_) == n, what_ + ": not every element was written");
  write_attr(dataset_.id(), "crc32", static_cast<int64_t>(crc_), what_);
  dataset_ = H5Handle();
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& what) {
  H5Handle a = open_attr(obj, name, what);
  check_integer_scalar(a, name, what);
  int64_t v = 0;
  h5_check(H5Aread(a.id(), H5T_NATIVE_INT64, &v), what + ": attribute '" + name + "' cannot be read");
  return v;
}

uint64_t read_attr_u64(hid_t obj, const std::string& name, const std::string& what) {
  H5Handle a = open_attr(obj, name, what);
  check_integer_scalar(a, name, what);
  uint64_t v = 0;
  h5_check(H5Aread(a.id(), H5T_NATIVE_UINT64, &v), what + ": attribute '" + name + "' cannot be read");
  return v;
}

std::string read_attr_str(hid_t obj, const std::string& name, const std::string& what) {
  const std::string w = what + ": attribute '" + name + "'";
  H5Handle a = open_attr(obj, name, what);
  H5Handle type = H5Handle::type(h5_check(H5Aget_type(a.id()), w));
  H5Handle space = H5Handle::space(h5_check(H5Aget_space(a.id()), w));
  if (H5Tget_class(type.id()) != H5T_STRING || H5Sget_simple_extent_npoints(space.id()) != 1)
    throw UserError(w + " is " + data::h5_type_name(type.id()) + ", expected a string");
  if (H5Tis_variable_str(type.id()) > 0) {
    char* p = nullptr;
    h5_check(H5Aread(a.id(), type.id(), &p), w + " cannot be read");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  std::string s(H5Tget_size(type.id()), '\0');
  h5_check(H5Aread(a.id(), type.id(), s.data()), w + " cannot be read");
  return s.substr(0, std::strlen(s.c_str()));
}

std::vector<int64_t> read_attr_i64s(hid_t obj, const std::string& name, const std::string& what) {
  const std::string w = what + ": attribute '" + name + "'";
  H5Handle a = open_attr(obj, name, what);
  H5Handle type = H5Handle::type(h5_check(H5Aget_type(a.id()), w));
  H5Handle space = H5Handle::space(h5_check(H5Aget_space(a.id()), w));
  if (H5Sget_simple_extent_type(space.id()) == H5S_NULL) return {};
  if (H5Tget_class(type.id()) != H5T_INTEGER) throw UserError(w + " is not a list of integers");
  const hssize_t n = H5Sget_simple_extent_npoints(space.id());
  if (n < 0 || n > 64) throw UserError(w + " has an unexpected size");
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (n) h5_check(H5Aread(a.id(), H5T_NATIVE_INT64, v.data()), w + " cannot be read");
  return v;
}

namespace {

// Opens `name` after checking that it exists, holds floats of `dtype`'s size and (expected_count ≥ 0)
// that many elements; its element count into n.
H5Handle open_floats(hid_t loc, const std::string& name, DType dtype, int64_t expected_count, int64_t& n,
                     const std::string& w) {
  if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) throw UserError(w + " is missing");
  H5Handle d = H5Handle::dataset(h5_check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), w + " cannot be opened"));
  H5Handle type = H5Handle::type(h5_check(H5Dget_type(d.id()), w));
  H5Handle space = H5Handle::space(h5_check(H5Dget_space(d.id()), w));
  const size_t want_bytes = dtype_size(dtype);
  if (H5Tget_class(type.id()) != H5T_FLOAT || H5Tget_size(type.id()) != want_bytes)
    throw UserError(w + " is " + data::h5_type_name(type.id()) + ", expected float" +
                    std::to_string(8 * want_bytes));
  const hssize_t points = H5Sget_simple_extent_npoints(space.id());
  if (points < 0 || (expected_count >= 0 && points != expected_count))
    throw UserError(w + " has " + std::to_string(points) + " elements, expected " +
                    std::to_string(expected_count));
  n = static_cast<int64_t>(points);
  return d;
}

void check_crc(hid_t dataset, uint32_t actual, const std::string& w) {
  const uint32_t stored = static_cast<uint32_t>(read_attr_i64(dataset, "crc32", w));
  if (stored != actual) {
    char msg[96];
    std::snprintf(msg, sizeof msg, " is damaged (CRC-32 %08x, stored %08x)", actual, stored);
    throw UserError(w + msg);
  }
}

}  // namespace

Tensor read_tensor(hid_t loc, const std::string& name, DType dtype, int64_t expected_count,
                   const std::string& what) {
  const std::string w = what + ": " + name;
  int64_t n = 0;
  H5Handle d = open_floats(loc, name, dtype, expected_count, n, w);
  Tensor t(Shape{n}, dtype);
  if (n > 0)
    h5_check(H5Dread(d.id(), dtype == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                     H5P_DEFAULT, t.raw()),
             w + " cannot be read");
  check_crc(d.id(), crc32_bytes(t.raw(), t.num_bytes()), w);
  return t;
}

TensorReader::TensorReader(hid_t loc, const std::string& name, int64_t expected_count,
                           const std::string& what)
    : what_(what + ": " + name) {
  dataset_ = open_floats(loc, name, DType::F32, expected_count, count_, what_);
  H5Handle space = H5Handle::space(h5_check(H5Dget_space(dataset_.id()), what_));
  const int rank = h5_check(H5Sget_simple_extent_ndims(space.id()), what_);
  dims_.assign(static_cast<size_t>(std::max(rank, 1)), 1);
  if (rank > 0) h5_check(H5Sget_simple_extent_dims(space.id(), dims_.data(), nullptr), what_);
}

void TensorReader::read(int64_t begin, const Tensor& out) const {
  HPC_ASSERT(out.dtype() == DType::F32 && out.device() == Device::CPU, "checkpoint pieces are host float32");
  HPC_ASSERT(begin >= 0 && begin + out.count() <= count_, what_ + ": read past its end");
  if (out.count() == 0) return;
  const Selection at = select_elements(dataset_.id(), dims_, begin, out.count(), what_);
  h5_check(H5Dread(dataset_.id(), H5T_NATIVE_FLOAT, at.memory.id(), at.file.id(), H5P_DEFAULT, out.raw()),
           what_ + " cannot be read");
}

PayloadCrc TensorReader::verify(int64_t chunk_elems) const {
  const Tensor chunk(Shape{std::max<int64_t>(1, std::min(chunk_elems, count_))}, DType::F32);
  uint32_t crc = 0;
  for (int64_t begin = 0; begin < count_; begin += chunk_elems) {
    const Tensor part = chunk.slice(0, Shape{std::min(chunk_elems, count_ - begin)});
    read(begin, part);
    crc = crc32_bytes(part.raw(), part.num_bytes(), crc);
  }
  check_crc(dataset_.id(), crc, what_);
  return {crc, static_cast<uint64_t>(count_) * 4};
}

std::vector<std::string> list_group(hid_t loc, const std::string& name, const std::string& what) {
  std::vector<std::string> names;
  if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) return names;
  H5Handle g = H5Handle::group(h5_check(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), what + ": " + name));
  H5G_info_t info{};
  h5_check(H5Gget_info(g.id(), &info), what + ": " + name);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = h5_check(
        H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), what);
    std::string s(static_cast<size_t>(len) + 1, '\0');
    h5_check(H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT),
             what);
    s.resize(static_cast<size_t>(len));
    names.push_back(s);
  }
  return names;
}

}  // namespace hpc::ckpt::h5
