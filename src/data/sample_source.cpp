// The two SampleSource kinds: MappedSource (mmap at H5Dget_offset) and
// ReadSource (H5Dread of runs of rows through the chunk cache).
#include "data/sample_source.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fault.h"
#include "data/file_mapping.h"
#include "data/h5_handle.h"

namespace hpc::data {

namespace {

class MappedSource : public SampleSource {
 public:
  MappedSource(const SourceRequest& r, const std::string& file, haddr_t offset)
      : SampleSource(r.rows, r.row_bytes),
        map_(file, offset, static_cast<uint64_t>(r.rows) * static_cast<uint64_t>(r.row_bytes), r.what) {}

  const std::byte* data() const override { return map_.data(); }
  void read_rows(const int64_t* idx, int64_t n, std::byte* out) const override {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out + i * row_bytes(), map_.data() + idx[i] * row_bytes(),
                  static_cast<size_t>(row_bytes()));
  }
  void read_range(int64_t first, int64_t n, std::byte* out) const override {
    std::memcpy(out, map_.data() + first * row_bytes(), static_cast<size_t>(n * row_bytes()));
  }

 private:
  FileMapping map_;
};

class ReadSource : public SampleSource {
 public:
  ReadSource(hid_t file, const SourceRequest& r, std::string why_not)
      : SampleSource(r.rows, r.row_bytes),
        mem_type_(r.mem_type),
        what_(r.what),
        why_not_(std::move(why_not)) {
    auto lock = h5_lock();
    H5QuietErrors quiet;
    // The chunk cache comes with the access list (h5_dataset_access): HDF5
    // shares one cache among all handles of an open dataset, set by the first
    // open, so every open of a data file's datasets carries the same one.
    H5Handle dapl = h5_dataset_access(what_);
    dset_ = H5Handle::dataset(h5_check(H5Dopen2(file, r.name.c_str(), dapl.id()), what_ + ": cannot open"));
    H5Handle space = H5Handle::space(h5_check(H5Dget_space(dset_.id()), what_ + ": cannot read its shape"));
    const int rank = h5_check(H5Sget_simple_extent_ndims(space.id()), what_ + ": cannot read its shape");
    dims_.resize(static_cast<size_t>(rank));
    h5_check(H5Sget_simple_extent_dims(space.id(), dims_.data(), nullptr), what_ + ": cannot read its shape");
    row_elems_ = 1;
    for (size_t d = 1; d < dims_.size(); ++d) row_elems_ *= dims_[d];
    HPC_ASSERT(static_cast<int64_t>(row_elems_ * H5Tget_size(mem_type_)) == row_bytes(),
               "ReadSource row size");
  }

  ~ReadSource() override {
    auto lock = h5_lock();
    dset_.reset();
  }

  void read_rows(const int64_t* idx, int64_t n, std::byte* out) const override {
    if (n <= 0) return;
    // Sort, merge into runs of consecutive rows (reading each row once, in
    // file order), then put every row where the caller wants it.
    std::vector<std::pair<int64_t, int64_t>> by_row(static_cast<size_t>(n));  // (row, position in out)
    for (int64_t i = 0; i < n; ++i) by_row[static_cast<size_t>(i)] = {idx[i], i};
    std::sort(by_row.begin(), by_row.end());
    std::vector<std::pair<int64_t, int64_t>> runs;  // (first row, count)
    for (const auto& [row, pos] : by_row) {
      if (!runs.empty() && row < runs.back().first + runs.back().second) continue;  // a repeat
      if (!runs.empty() && row == runs.back().first + runs.back().second)
        ++runs.back().second;
      else
        runs.emplace_back(row, 1);
    }
    int64_t unique = 0;
    for (const auto& r : runs) unique += r.second;
    const bool in_place = unique == n && std::is_sorted(idx, idx + n);
    std::vector<std::byte> scratch(in_place ? 0 : static_cast<size_t>(unique * row_bytes()));
    std::byte* buf = in_place ? out : scratch.data();
    read_selection(runs, buf);
    if (in_place) return;
    int64_t slot = -1, last_row = -1;
    for (const auto& [row, pos] : by_row) {
      if (row != last_row) ++slot, last_row = row;
      std::memcpy(out + pos * row_bytes(), buf + slot * row_bytes(), static_cast<size_t>(row_bytes()));
    }
  }

  void read_range(int64_t first, int64_t n, std::byte* out) const override {
    if (n > 0) read_selection({{first, n}}, out);
  }

  std::string why_not_mapped() const override { return why_not_; }

 private:
  // One H5Dread per run of consecutive rows, into out one run after the
  // other. (A single read of the union of all runs is slower in HDF5 1.10:
  // building the union and intersecting it with every chunk costs more than
  // the calls it saves, 2.5× on contiguous and 1.6× on chunked data.)
  void read_selection(const std::vector<std::pair<int64_t, int64_t>>& runs, std::byte* out) const {
    auto lock = h5_lock();
    H5QuietErrors quiet;  // per thread in thread-safe HDF5 builds, so set here, in the reading thread
    const std::string what = what_ + ": reading samples failed";
    H5Handle fspace = H5Handle::space(h5_check(H5Dget_space(dset_.id()), what));
    std::vector<hsize_t> start(dims_.size(), 0), count(dims_);
    for (const auto& [first, rows] : runs) {
      start[0] = static_cast<hsize_t>(first);
      count[0] = static_cast<hsize_t>(rows);
      h5_check(H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
               what);
      const hsize_t elems = static_cast<hsize_t>(rows) * row_elems_;
      H5Handle mspace = H5Handle::space(h5_check(H5Screate_simple(1, &elems, nullptr), what));
      const std::string span =
          rows == 1 ? "row " + std::to_string(first)
                    : "rows " + std::to_string(first) + " to " + std::to_string(first + rows - 1);
      if (const int err = fault_at(FaultPoint::DataRead)) throw_read_error(what_, span, err);
      if (H5Dread(dset_.id(), mem_type_, mspace.id(), fspace.id(), H5P_DEFAULT, out) < 0) {
        // HDF5's sec2 driver puts the errno of a failed read(2) into its message ("errno = 5, …").
        const std::string detail = h5_error_detail();
        H5Eclear2(H5E_DEFAULT);
        const size_t at = detail.find("errno = ");
        throw_read_error(what_, span, at == std::string::npos ? 0 : std::atoi(detail.c_str() + at + 8),
                         detail);
      }
      out += rows * row_bytes();
    }
  }

  hid_t mem_type_;
  std::string what_, why_not_;
  std::vector<hsize_t> dims_;
  hsize_t row_elems_ = 1;
  H5Handle dset_;
};

std::string filter_names(hid_t dcpl) {
  std::string names;
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    size_t nelem = 0;
    char name[64] = "";
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelem, nullptr, sizeof name, name, &config);
    names += (names.empty() ? "" : ", ") + std::string(*name ? name : "filter " + std::to_string(id));
  }
  return names;
}

std::string order_name(hid_t type) {
  switch (H5Tget_order(type)) {
    case H5T_ORDER_LE:
      return "little-endian";
    case H5T_ORDER_BE:
      return "big-endian";
    default:
      return "";
  }
}

std::string file_name(hid_t obj) {
  const ssize_t len = H5Fget_name(obj, nullptr, 0);
  if (len <= 0) return "";
  std::string name(static_cast<size_t>(len) + 1, '\0');
  H5Fget_name(obj, name.data(), name.size());
  name.resize(static_cast<size_t>(len));
  return name;
}

}  // namespace

MmapCheck check_mmap(hid_t dataset, hid_t mem_type) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  MmapCheck c;
  H5Handle dcpl = H5Handle::plist(H5Dget_create_plist(dataset));
  H5Handle ftype = H5Handle::type(H5Dget_type(dataset));
  if (!dcpl.valid() || !ftype.valid()) {
    c.why_not = "its layout cannot be read";
    return c;
  }
  switch (H5Pget_layout(dcpl.id())) {
    case H5D_CONTIGUOUS:
      break;
    case H5D_CHUNKED: {
      const std::string filters = filter_names(dcpl.id());
      c.why_not = filters.empty() ? "chunked" : "chunked, filters: " + filters;
      return c;
    }
    case H5D_COMPACT:
      c.why_not = "compact (stored in the object header)";
      return c;
    case H5D_VIRTUAL:
      c.why_not = "virtual (assembled from other datasets)";
      return c;
    default:
      c.why_not = "of an unknown layout";
      return c;
  }
  if (H5Pget_external_count(dcpl.id()) > 0) {
    c.why_not = "stored in external raw files";
    return c;
  }
  H5Handle native;
  if (mem_type < 0) {
    native = H5Handle::type(H5Tget_native_type(ftype.id(), H5T_DIR_ASCEND));
    mem_type = native.id();
  }
  if (mem_type < 0 || H5Tequal(ftype.id(), mem_type) <= 0) {
    const std::string order = order_name(ftype.id());
    c.why_not =
        h5_type_name(ftype.id()) + (order.empty() ? "" : " " + order) + " on disk is not this machine's " +
        (mem_type < 0
             ? "type"
             : h5_type_name(mem_type) + (order_name(mem_type).empty() ? "" : " " + order_name(mem_type)));
    return c;
  }
  c.offset = H5Dget_offset(dataset);
  if (c.offset == HADDR_UNDEF) {
    c.why_not = "not allocated (never written)";
    return c;
  }
  c.file = file_name(dataset);
  if (c.file.empty()) c.why_not = "its file name cannot be read";
  return c;
}

std::string row_span(const int64_t* idx, int64_t n) {
  if (n <= 0) return "no rows";
  const auto [lo, hi] = std::minmax_element(idx, idx + n);
  return std::to_string(n) + (n == 1 ? " sample" : " samples") + " (rows " + std::to_string(*lo) + " to " +
         std::to_string(*hi) + ")";
}

void throw_read_error(const std::string& what, const std::string& rows, int err, const std::string& detail) {
  if (err == 0)
    throw UserError(what + ": reading " + rows + " failed" + (detail.empty() ? "" : " (" + detail + ")"));
  throw IoError(what + ": reading " + rows + " failed: " + std::strerror(err) + (err == EIO ? " (EIO)" : ""));
}

void check_written(hid_t dataset, const std::string& what) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle dcpl = H5Handle::plist(h5_check(H5Dget_create_plist(dataset), what + ": cannot read its layout"));
  const H5D_layout_t layout = H5Pget_layout(dcpl.id());
  if (layout == H5D_CONTIGUOUS && H5Pget_external_count(dcpl.id()) == 0 &&
      H5Dget_offset(dataset) == HADDR_UNDEF)
    throw UserError(what + ": its data was never written (an interrupted conversion?); write it again");
  if (layout != H5D_CHUNKED) return;
  // HDF5 reads a chunk that was never written as fill values, so a file of a
  // few bytes can claim 2^40 rows that validation would scan for days.
  H5Handle space = H5Handle::space(h5_check(H5Dget_space(dataset), what + ": cannot read its shape"));
  const int rank = h5_check(H5Sget_simple_extent_ndims(space.id()), what + ": cannot read its shape");
  std::vector<hsize_t> dims(static_cast<size_t>(rank)), chunk(static_cast<size_t>(rank));
  h5_check(H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr), what + ": cannot read its shape");
  h5_check(H5Pget_chunk(dcpl.id(), rank, chunk.data()), what + ": cannot read its chunk shape");
  hsize_t expected = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    const hsize_t per_dim = chunk[d] ? (dims[d] + chunk[d] - 1) / chunk[d] : 0;
    expected = per_dim && expected > UINT64_MAX / per_dim ? UINT64_MAX : expected * per_dim;
  }
  hsize_t stored = 0;
  h5_check(H5Dget_num_chunks(dataset, space.id(), &stored), what + ": cannot count its chunks");
  if (stored < expected)
    throw UserError(what + ": only " + std::to_string(stored) + " of its " + std::to_string(expected) +
                    " chunks were ever written (an interrupted conversion?); write it again");
}

std::unique_ptr<SampleSource> open_source(hid_t file, const SourceRequest& r) {
  HPC_ASSERT(r.rows > 0 && r.row_bytes > 0, "open_source of an empty dataset");
  if (r.row_bytes > INT64_MAX / r.rows) throw UserError(r.what + ": its size overflows 64 bits");
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle dapl = h5_dataset_access(r.what);
  H5Handle dset =
      H5Handle::dataset(h5_check(H5Dopen2(file, r.name.c_str(), dapl.id()), r.what + ": cannot open"));
  check_written(dset.id(), r.what);
  std::string why_not = "not mapped (disabled by the caller)";
  if (r.allow_mmap) {
    MmapCheck c = check_mmap(dset.id(), r.mem_type);
    // Behind an external link the data lives in another file, whose name
    // HDF5 resolved by its own search rules: read it through HDF5 instead.
    if (c.why_not.empty() && c.file != file_name(file))
      c.why_not = "in another file (" + c.file + ", external link)";
    if (c.why_not.empty()) return std::make_unique<MappedSource>(r, c.file, c.offset);
    why_not = c.why_not;
  }
  return std::make_unique<ReadSource>(file, r, why_not);
}

}  // namespace hpc::data
