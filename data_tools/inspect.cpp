// hpcdata inspect: what is in a dataset file, and would hpctrain accept it.
//
// The listing works on any HDF5 file (it walks every link and prints each
// dataset's dtype, shape, storage layout, file offset, whether hpctrain can
// memory-map it (and why not), attributes, plus a class histogram for
// integer labels), so it also explains files that fail validation. The verdict then comes from
// data::H5Dataset itself with the full NaN/Inf scan, so inspect and hpctrain can never disagree.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "data/h5_dataset.h"
#include "data/h5_handle.h"
#include "data/image_dataset.h"
#include "data/sample_source.h"
#include "data/token_dataset.h"

namespace hpc::data_tools {

using data::h5_check;
using data::H5Handle;

namespace {

constexpr haddr_t PAGE = 4096;
constexpr size_t MAX_HISTOGRAM_CLASSES = 32;  // more than this: a summary instead of every bin

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::string attr_text(hid_t obj, const std::string& name) {
  H5Handle a = H5Handle::attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  H5Handle t = H5Handle::type(H5Aget_type(a.id()));
  H5Handle s = H5Handle::space(H5Aget_space(a.id()));
  const H5T_class_t cls = H5Tget_class(t.id());
  double v = 0;
  if ((cls == H5T_FLOAT || cls == H5T_INTEGER) && H5Sget_simple_extent_npoints(s.id()) == 1 &&
      H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v) >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s=%.9g", name.c_str(), v);
    return buf;
  }
  if (cls == H5T_STRING && H5Tis_variable_str(t.id()) == 0) {  // tokenizer=byte
    std::string v(H5Tget_size(t.id()), '\0');
    if (H5Aread(a.id(), t.id(), v.data()) >= 0) return name + "=" + v.substr(0, v.find('\0'));
  }
  return name + "=<" + data::h5_type_name(t.id()) + ">";
}

// "contiguous at 4096 (4 KiB-aligned), mmap: yes", "chunked, filters: deflate, mmap: no", or
// "contiguous at 2048 (not aligned), mmap: no (float32 big-endian on disk is not …)".
std::string layout_text(hid_t dset, bool& mappable) {
  H5Handle dcpl = H5Handle::plist(H5Dget_create_plist(dset));
  std::string out;
  switch (H5Pget_layout(dcpl.id())) {
    case H5D_CONTIGUOUS:
      out = "contiguous";
      break;
    case H5D_CHUNKED:
      out = "chunked";
      break;
    case H5D_COMPACT:
      out = "compact";
      break;
    case H5D_VIRTUAL:
      out = "virtual";
      break;
    default:
      out = "unknown layout";
      break;
  }
  const haddr_t offset = H5Dget_offset(dset);
  if (offset != HADDR_UNDEF)
    out += " at " + std::to_string(offset) + (offset % PAGE == 0 ? " (4 KiB-aligned)" : " (not aligned)");
  // The same test hpctrain applies (against the native type of the stored class).
  const data::MmapCheck mc = data::check_mmap(dset);
  mappable = mc.why_not.empty();
  if (mappable) return out + ", mmap: yes";
  if (mc.why_not.rfind(out, 0) == 0) return mc.why_not + ", mmap: no";  // "chunked, filters: deflate"
  return out + ", mmap: no (" + mc.why_not + ")";
}

// "classes: 0:790 1:901 …" for 1-D integer datasets, read in blocks (any size).
void print_histogram(hid_t file, const std::string& name, int64_t n) {
  std::map<int64_t, int64_t> counts;
  try {
    std::unique_ptr<data::SampleSource> src =
        data::open_source(file, data::SourceRequest{name, H5T_NATIVE_INT64, n, sizeof(int64_t), false, name});
    data::scan_rows(*src, 0, n, [&](const std::byte* rows, int64_t, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        int64_t v;
        std::memcpy(&v, rows + i * 8, sizeof v);
        ++counts[v];
      }
    });
  } catch (const UserError&) {
    std::printf("      classes: unreadable\n");
    return;
  }
  std::printf("      classes:");
  if (counts.size() <= MAX_HISTOGRAM_CLASSES) {
    for (auto [label, count] : counts) std::printf(" %lld:%lld", (long long)label, (long long)count);
  } else {
    auto [lo, hi] = std::minmax_element(counts.begin(), counts.end(),
                                        [](auto& a, auto& b) { return a.second < b.second; });
    std::printf(" %zu distinct, labels %lld..%lld, %lld to %lld samples each", counts.size(),
                (long long)counts.begin()->first, (long long)counts.rbegin()->first, (long long)lo->second,
                (long long)hi->second);
  }
  std::printf("\n");
}

void print_dataset(hid_t file, const std::string& name, bool& mappable) {
  H5Handle dapl = data::h5_dataset_access(name);
  H5Handle d = H5Handle::dataset(H5Dopen2(file, name.c_str(), dapl.id()));
  H5Handle t = H5Handle::type(H5Dget_type(d.id()));
  H5Handle s = H5Handle::space(H5Dget_space(d.id()));
  const int rank = H5Sget_simple_extent_ndims(s.id());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(s.id(), dims.data(), nullptr);
  const Shape shape(std::vector<int64_t>(dims.begin(), dims.end()));

  std::vector<std::string> attrs;
  H5Aiterate2(d.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attr, &attrs);
  std::string attr_line;
  for (const std::string& a : attrs) attr_line += "  " + attr_text(d.id(), a);

  std::printf("  /%-10s %-8s %-16s %s%s\n", name.c_str(), data::h5_type_name(t.id()).c_str(),
              shape.str().c_str(), layout_text(d.id(), mappable).c_str(), attr_line.c_str());
  const bool labels = name.size() >= 2 && name.compare(name.size() - 2, 2, "/y") == 0;
  if (labels && rank == 1 && H5Tget_class(t.id()) == H5T_INTEGER && dims[0] > 0)
    print_histogram(file, "/" + name, static_cast<int64_t>(dims[0]));
}

std::string verdict(const data::SplitInfo& info) {
  std::string s = std::to_string(info.size) + " samples of " + info.sample_shape.str() + " " +
                  dtype_name(info.x_dtype) + ", ";
  if (info.classification) return s + std::to_string(info.num_classes) + " classes";
  return s + "targets of " + std::to_string(info.target_shape[0]) + " float32";
}

}  // namespace

int inspect_file(const std::string& path) {
  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  H5Handle file = data::h5_open_read_only(path);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  std::printf("%s: HDF5, %.1f MiB\n", path.c_str(), double(bytes) / double(1 << 20));

  std::vector<std::string> links;
  h5_check(H5Lvisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, collect_link, &links),
           "data file '" + path + "': cannot list its contents");
  bool all_mappable = true;
  for (const std::string& name : links) {
    H5Handle lapl = data::h5_dataset_access(name);  // a dataset access list is a link access list
    H5Handle obj(H5Oopen(file.id(), name.c_str(), lapl.id()), H5Oclose, "object");
    bool mappable = true;
    if (obj.valid() && H5Iget_type(obj.id()) == H5I_DATASET) print_dataset(file.id(), name, mappable);
    all_mappable = all_mappable && mappable;
  }
  file.reset();
  if (!all_mappable)
    std::printf(
        "note: hpctrain reads datasets with 'mmap: no' through H5Dread, which is slower; "
        "'hpcdata repack %s OUT.h5' rewrites them contiguous and 4 KiB-aligned\n",
        path.c_str());

  int rc = EXIT_OK;
  bool any = false;
  for (const char* split : {"train", "val"}) {
    if (!data::H5Dataset::has_split(path, split)) continue;
    any = true;
    try {
      if (data::TokenDataset::has_tokens(path, split)) {
        // Windows depend on the model's context; the tokens themselves do not (context 1: any 2 tokens).
        data::TokenDataset ds(path, split, 1, data::OpenOptions{true, true});
        std::printf("%s: OK, %lld tokens (%s), vocabulary %lld from %s%s\n", split,
                    static_cast<long long>(ds.num_tokens()), data::token_type_name(ds.token_type()),
                    static_cast<long long>(ds.vocab()), ds.vocab_source().c_str(),
                    ds.tokenizer().empty() ? "" : (", tokenizer " + ds.tokenizer()).c_str());
        continue;
      }
      if (data::ImageDataset::is_image_file(path)) {  // every image's header read: data.check full
        data::ImageDataset ds(path, split, 0, data::OpenOptions{true, true});
        std::printf("%s: OK, %s\n", split, ds.describe().c_str());
        continue;
      }
      data::H5Dataset ds(path, split, /*full_check=*/true);
      std::printf("%s: OK, %s\n", split, verdict(ds.info()).c_str());
    } catch (const UserError& e) {
      std::printf("%s: INVALID\n", split);
      std::fflush(stdout);
      std::fprintf(stderr, "hpcdata: %s\n", e.what());
      rc = EXIT_BAD_INPUT;
    }
  }
  if (!any) {
    std::fflush(stdout);
    std::fprintf(stderr, "hpcdata: data file '%s': no /train or /val split\n", path.c_str());
    rc = EXIT_BAD_INPUT;
  }
  return rc;
}

}  // namespace hpc::data_tools
