// Fuzz target: HDF5 dataset validation and reading (src/data/h5_dataset.cpp,
// sample_source.cpp), what `hpctrain train` does with --data.path.
//
// Structure-aware (see h5_builder.h: libhdf5 itself never sees random
// bytes): the input decodes into a file with /train and maybe /val, each
// with x and y that may be a dataset of any of 9 types, rank 0-4, any small
// or zero shape, contiguous / chunked / deflate / compact storage, written
// from raw bit patterns (NaN, Inf, huge, negative labels) or small values,
// or never written; or a group, a soft link to another object, a dangling
// link, or nothing. Attributes scale/mean/std (x) and num_classes (y) may be
// any number, of the wrong type, a list, a string, or absent. Byte 0 picks
// the open options (full NaN scan, mmap allowed).
// Checks: opening each split ends in success or a UserError. A split that
// opens must deliver what validation promises: gather() of every sample
// (float32 and float64) gives finite inputs (all were scanned with
// full_check) and class ids inside [0, num_classes).
#include <cmath>
#include <vector>

#include "data/h5_dataset.h"
#include "h5_builder.h"

namespace {

constexpr const char* TARGET = "h5dataset";

void make_object(hpc::fuzz::ByteReader& in, hid_t file, const std::string& name, hsize_t leading,
                 const std::vector<const char*>& attrs) {
  switch (in.below(8)) {
    case 0:
      return;  // missing
    case 1: {
      hpc::data::H5Handle lcpl = hpc::data::H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
      H5Pset_create_intermediate_group(lcpl.id(), 1);
      hpc::data::H5Handle g =
          hpc::data::H5Handle::group(H5Gcreate2(file, name.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
      return;
    }
    case 2:
      H5Lcreate_soft(in.flag() ? "/train/x" : "/nowhere", file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
      return;
    default:
      hpc::fuzz::make_dataset(in, file, name, leading, attrs);
  }
}

template <typename T>
void check_split(const hpc::data::H5Dataset& ds, bool full_check) {
  using namespace hpc;
  const data::SplitInfo& info = ds.info();
  const int64_t n = std::min<int64_t>(info.size, 64);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = n - 1 - i;  // reversed: the sorting path
  const DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  Tensor x(info.sample_shape.with_batch(n), dt);
  Tensor y(info.classification ? Shape{n} : info.target_shape.with_batch(n),
           info.classification ? DType::I32 : dt);
  ds.gather(idx.data(), n, x, y);
  if (full_check)
    for (int64_t i = 0; i < x.count(); ++i)
      fuzz::require(
          std::isfinite(x.data<T>()[i]), TARGET,
          "validated x of /" + ds.split() + " gathers to a non-finite value at element " + std::to_string(i));
  if (info.classification)
    for (int64_t i = 0; i < n; ++i) {
      const int32_t v = y.data<int32_t>()[i];
      fuzz::require(
          v >= 0 && v < info.num_classes, TARGET,
          "validated label " + std::to_string(v) + " outside [0, " + std::to_string(info.num_classes) + ")");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::ByteReader in(data, size);
  const uint8_t o = in.u8();
  const data::OpenOptions options{(o & 1) != 0, (o & 2) != 0};
  const std::string path = fuzz::scratch().path() + "/data.h5";
  {
    auto lock = data::h5_lock();
    data::H5QuietErrors quiet;
    data::H5Handle file = fuzz::create_file(path);
    if (!file.valid()) fuzz::finding(TARGET, "cannot create " + path);
    const hsize_t leading = in.below(6);
    for (const char* split : {"train", "val"}) {
      if (split[0] == 'v' && !(o & 4)) break;
      const std::string s = std::string("/") + split;
      make_object(in, file.id(), s + "/x", leading, {"scale", "mean", "std"});
      make_object(in, file.id(), s + "/y", leading, {"num_classes"});
    }
  }
  for (const char* split : {"train", "val"}) {
    fuzz::expect_clean(TARGET, [&] {
      if (!data::H5Dataset::has_split(path, split)) return;
      data::H5Dataset ds(path, split, options);
      check_split<float>(ds, options.full_check);
      check_split<double>(ds, options.full_check);
      (void)data::mmap_advice({&ds});
    });
  }
  return 0;
}
