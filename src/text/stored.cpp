// read_stored_tokenizer: /tokenizer of a packed dataset (stored.h), read with the data folder's HDF5 handles.
#include "text/stored.h"

#include "core/error.h"
#include "data/h5_handle.h"

namespace hpc::text {

using data::h5_check;
using data::H5Handle;

namespace {

std::string string_attr(hid_t obj, const char* name, const std::string& what) {
  if (h5_check(H5Aexists(obj, name), what) <= 0) return "";
  H5Handle a = H5Handle::attr(h5_check(H5Aopen(obj, name, H5P_DEFAULT), what));
  H5Handle t = H5Handle::type(h5_check(H5Aget_type(a.id()), what));
  if (H5Tget_class(t.id()) != H5T_STRING || H5Tis_variable_str(t.id()) > 0)
    throw UserError(what + ": attribute '" + name + "' is not a fixed-length string");
  std::string v(H5Tget_size(t.id()), '\0');
  h5_check(H5Aread(a.id(), t.id(), v.data()), what);
  return v.substr(0, v.find('\0'));
}

int64_t int_attr(hid_t obj, const char* name, int64_t fallback, const std::string& what) {
  if (h5_check(H5Aexists(obj, name), what) <= 0) return fallback;
  H5Handle a = H5Handle::attr(h5_check(H5Aopen(obj, name, H5P_DEFAULT), what));
  int64_t v = fallback;
  h5_check(H5Aread(a.id(), H5T_NATIVE_INT64, &v), what + ": attribute '" + name + "' is not an integer");
  return v;
}

}  // namespace

std::optional<StoredTokenizer> read_stored_tokenizer(const std::string& h5_path) {
  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  H5Handle file = data::h5_open_read_only(h5_path);
  const std::string what = "data file '" + h5_path + "': " + STORED_TOKENIZER;
  if (H5Lexists(file.id(), STORED_TOKENIZER, H5P_DEFAULT) <= 0) return std::nullopt;
  H5Handle dset = H5Handle::dataset(h5_check(H5Dopen2(file.id(), STORED_TOKENIZER, H5P_DEFAULT), what));
  H5Handle type = H5Handle::type(h5_check(H5Dget_type(dset.id()), what));
  H5Handle space = H5Handle::space(h5_check(H5Dget_space(dset.id()), what));
  if (H5Tget_class(type.id()) != H5T_INTEGER || H5Tget_size(type.id()) != 1 ||
      H5Sget_simple_extent_ndims(space.id()) != 1)
    throw UserError(what + " is not a 1-D array of bytes (the tokenizer file)");
  StoredTokenizer st;
  st.bytes.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space.id())));
  if (!st.bytes.empty())
    h5_check(H5Dread(dset.id(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, st.bytes.data()), what);
  st.format = string_attr(dset.id(), "format", what);
  st.name = string_attr(dset.id(), "name", what);
  st.file = string_attr(dset.id(), "file", what);
  st.vocab_size = int_attr(dset.id(), "vocab_size", 0, what);
  st.bos_id = int_attr(dset.id(), "bos_id", -1, what);
  st.eos_id = int_attr(dset.id(), "eos_id", -1, what);
  return st;
}

}  // namespace hpc::text
