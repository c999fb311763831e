// The two ways H5Dataset reads samples agree bit for bit: memory-mapped
// (contiguous, native type; at any offset, also behind a user block) and the
// H5Dread fallback (forced, chunked + gzip, big-endian, compact), for uint8
// and float32 inputs, class ids and regression targets, into float and
// double, with unsorted and repeated indices. Validation finds the same
// problems through both paths; the info line names what is not mappable.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "data/h5_dataset.h"
#include "data/h5_handle.h"
#include "data/sample_source.h"
#include "temp_dir.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::UserError;
using namespace hpc::data;

namespace {

using hpc::test::TempDir;

enum class Layout { Contiguous, ChunkedGzip, Compact };

struct Spec {
  Layout layout = Layout::Contiguous;
  bool big_endian = false;
  hsize_t userblock = 0;
};

// Writes one dataset with the requested storage.
void write(hid_t file, const std::string& name, hid_t file_type, hid_t mem_type,
           const std::vector<hsize_t>& dims, const void* data, const Spec& spec) {
  H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  H5Handle dcpl = H5Handle::plist(H5Pcreate(H5P_DATASET_CREATE));
  if (spec.layout == Layout::ChunkedGzip) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = std::min<hsize_t>(dims[0], 7);  // small chunks: a batch spans several
    H5Pset_chunk(dcpl.id(), int(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl.id(), 4);
  } else if (spec.layout == Layout::Compact) {
    H5Pset_layout(dcpl.id(), H5D_COMPACT);
  }
  H5Handle space = H5Handle::space(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
  H5Handle d = H5Handle::dataset(
      H5Dcreate2(file, name.c_str(), file_type, space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT));
  ASSERT_TRUE(d.valid()) << name;
  ASSERT_GE(H5Dwrite(d.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0) << name;
}

struct Data {
  int64_t n = 0;
  std::vector<uint8_t> xu8;
  std::vector<float> xf32, targets;
  std::vector<int32_t> labels;
};

Data make_data(int64_t n, int64_t per, uint64_t seed) {
  hpc::Rng rng(seed);
  Data d;
  d.n = n;
  for (int64_t i = 0; i < n * per; ++i) {
    d.xu8.push_back(static_cast<uint8_t>(rng.below(256)));
    d.xf32.push_back(static_cast<float>(rng.normal()));
  }
  for (int64_t i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<int32_t>(rng.below(5)));
    d.targets.push_back(static_cast<float>(rng.normal()));
    d.targets.push_back(static_cast<float>(rng.normal()));
  }
  return d;
}

// File with /train (uint8 x, class ids) and /val (float32 x, 2 float targets).
void write_file(const std::string& path, const Data& d, const Spec& spec) {
  H5Handle fcpl = H5Handle::plist(H5Pcreate(H5P_FILE_CREATE));
  if (spec.userblock) H5Pset_userblock(fcpl.id(), spec.userblock);
  H5Handle f = H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.id(), H5P_DEFAULT));
  const hsize_t n = hsize_t(d.n), per = hsize_t(d.xu8.size()) / n;
  write(f.id(), "/train/x", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n, 1, per}, d.xu8.data(), spec);
  write(f.id(), "/train/y", spec.big_endian ? H5T_STD_I32BE : H5T_STD_I32LE, H5T_NATIVE_INT32, {n},
        d.labels.data(), spec);
  write(f.id(), "/val/x", spec.big_endian ? H5T_IEEE_F32BE : H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, per},
        d.xf32.data(), spec);
  write(f.id(), "/val/y", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, 2}, d.targets.data(), spec);
  H5Handle a_space = H5Handle::space(H5Screate(H5S_SCALAR));
  H5Handle x = H5Handle::dataset(H5Dopen2(f.id(), "/train/x", H5P_DEFAULT));
  for (auto [name, v] : {std::pair{"scale", 1.0 / 255}, std::pair{"mean", 0.5}, std::pair{"std", 0.25}}) {
    H5Handle a =
        H5Handle::attr(H5Acreate2(x.id(), name, H5T_IEEE_F64LE, a_space.id(), H5P_DEFAULT, H5P_DEFAULT));
    H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &v);
  }
}

// Unsorted, with repeats and both ends: what samplers hand out (padding repeats a sample).
std::vector<int64_t> batch_indices(int64_t n) {
  std::vector<int64_t> idx = {n - 1, 3, 0, 17, 3, n / 2, 18, 19, 1, n - 1, 42, 41};
  hpc::Rng rng(9);
  for (int i = 0; i < 30; ++i) idx.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))));
  return idx;
}

// The gathered bytes of `split` for every output dtype.
std::vector<std::vector<std::byte>> gather_all(const H5Dataset& ds, const std::vector<int64_t>& idx) {
  const int64_t n = static_cast<int64_t>(idx.size());
  const SplitInfo& info = ds.info();
  std::vector<std::vector<std::byte>> out;
  for (DType t : {DType::F32, DType::F64}) {
    Tensor x(info.sample_shape.with_batch(n), t);
    Tensor y =
        info.classification ? Tensor(Shape{n}, DType::I32) : Tensor(info.target_shape.with_batch(n), t);
    ds.gather(idx.data(), n, x, y);
    for (const Tensor* tt : {&x, &y}) {
      const auto* b = static_cast<const std::byte*>(tt->raw());
      out.emplace_back(b, b + tt->num_bytes());
    }
  }
  return out;
}

}  // namespace

TEST(H5DatasetReadPaths, MmapAndFallbackReturnIdenticalBatches) {
  TempDir dir;
  const Data d = make_data(211, 12, 1);
  const std::vector<int64_t> idx = batch_indices(d.n);
  write_file(dir.file("contiguous.h5"), d, {});
  write_file(dir.file("chunked.h5"), d, {Layout::ChunkedGzip});
  write_file(dir.file("big_endian.h5"), d, {Layout::Contiguous, true});
  write_file(dir.file("userblock.h5"), d, {Layout::Contiguous, false, 4096});
  write_file(dir.file("compact.h5"), make_data(40, 12, 1), {Layout::Compact});

  for (const char* split : {"train", "val"}) {
    const H5Dataset mapped(dir.file("contiguous.h5"), split);
    ASSERT_TRUE(mapped.mapped()) << "a contiguous native file (offset not page-aligned) must be mapped";
    const auto want = gather_all(mapped, idx);

    // The values are right, not just equal to each other: spot-check the mapped path.
    if (std::string(split) == "train") {
      Tensor x(Shape{1, 1, 12}, DType::F64), y(Shape{1}, DType::I32);
      const int64_t one = 17;
      mapped.gather(&one, 1, x, y);
      EXPECT_DOUBLE_EQ(x.data<double>()[5], (d.xu8[17 * 12 + 5] / 255.0 - 0.5) / 0.25);
      EXPECT_EQ(y.data<int32_t>()[0], d.labels[17]);
    }

    const H5Dataset forced(dir.file("contiguous.h5"), split, OpenOptions{false, false});
    EXPECT_FALSE(forced.mapped());
    EXPECT_EQ(gather_all(forced, idx), want) << split << ": forced H5Dread";

    const H5Dataset chunked(dir.file("chunked.h5"), split);
    EXPECT_FALSE(chunked.mapped());
    EXPECT_EQ(gather_all(chunked, idx), want) << split << ": chunked + gzip";

    const H5Dataset be(dir.file("big_endian.h5"), split);
    EXPECT_FALSE(be.mapped());
    EXPECT_EQ(gather_all(be, idx), want) << split << ": big-endian";

    const H5Dataset ub(dir.file("userblock.h5"), split);
    EXPECT_TRUE(ub.mapped());
    EXPECT_EQ(gather_all(ub, idx), want) << split << ": behind a 4 KiB user block";
  }
  // Compact datasets (tiny, stored in the object header) are read, not mapped.
  const H5Dataset compact(dir.file("compact.h5"), "train");
  EXPECT_FALSE(compact.mapped());
  const std::vector<int64_t> few = {39, 0, 7, 7};
  EXPECT_EQ(gather_all(compact, few),
            gather_all(H5Dataset(dir.file("compact.h5"), "train", OpenOptions{false, false}), few));
}

TEST(H5DatasetReadPaths, ReasonsAndTheOneInfoLine) {
  TempDir dir;
  const Data d = make_data(30, 4, 2);
  write_file(dir.file("c.h5"), d, {});
  write_file(dir.file("z.h5"), d, {Layout::ChunkedGzip});
  write_file(dir.file("be.h5"), d, {Layout::Contiguous, true});

  const H5Dataset c(dir.file("c.h5"), "train");
  EXPECT_TRUE(c.unmapped().empty());
  EXPECT_EQ(mmap_advice({&c, nullptr}), "");

  const H5Dataset z(dir.file("z.h5"), "train"), zv(dir.file("z.h5"), "val");
  ASSERT_EQ(z.unmapped().size(), 2u);
  EXPECT_EQ(z.unmapped()[0], "/train/x (chunked, filters: deflate)");
  const std::string line = mmap_advice({&z, &zv});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("/train/x (chunked, filters: deflate)"), std::string::npos) << line;
  EXPECT_NE(line.find("/val/y (chunked, filters: deflate)"), std::string::npos) << line;
  EXPECT_NE(line.find("slower"), std::string::npos) << line;
  EXPECT_NE(line.find("hpcdata repack"), std::string::npos) << line;
  EXPECT_EQ(line.find("z.h5' and"), std::string::npos) << "the file is named once: " << line;

  const H5Dataset be(dir.file("be.h5"), "train");
  ASSERT_EQ(be.unmapped().size(), 1u);  // uint8 has no byte order; the int32 labels are big-endian
  EXPECT_NE(
      be.unmapped()[0].find("/train/y (int32 big-endian on disk is not this machine's int32 little-endian)"),
      std::string::npos)
      << be.unmapped()[0];
}

TEST(H5DatasetReadPaths, ValidationFindsTheSameProblemsThroughH5Dread) {
  TempDir dir;
  Data d = make_data(5000, 3, 3);
  d.labels[4321] = 7;  // > max of the others (4): fine without an attribute, so add one below
  d.xf32[4500 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  const std::string path = dir.file("bad.h5");
  write_file(path, d, {Layout::ChunkedGzip});
  {
    H5Handle f = H5Handle::file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    H5Handle y = H5Handle::dataset(H5Dopen2(f.id(), "/train/y", H5P_DEFAULT));
    H5Handle s = H5Handle::space(H5Screate(H5S_SCALAR));
    H5Handle a =
        H5Handle::attr(H5Acreate2(y.id(), "num_classes", H5T_STD_I64LE, s.id(), H5P_DEFAULT, H5P_DEFAULT));
    const int64_t five = 5;
    H5Awrite(a.id(), H5T_NATIVE_INT64, &five);
  }
  for (bool mmap : {true, false}) {
    try {
      const H5Dataset ds(path, "train", OpenOptions{false, mmap});
      ADD_FAILURE() << "label 7 of 5 classes accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("/train/y: label 7 at sample 4321 is outside [0, 5)"),
                std::string::npos)
          << e.what();
    }
    // NaN at sample 4500: beyond the quick check, found by the full one (in a later block of the scan).
    EXPECT_NO_THROW(H5Dataset(path, "val", OpenOptions{false, mmap}));
    try {
      const H5Dataset ds(path, "val", OpenOptions{true, mmap});
      ADD_FAILURE() << "NaN accepted by the full check";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("/val/x: sample 4500 contains NaN (element 1)"), std::string::npos)
          << e.what();
    }
  }
}

// Data that was never written (or only partly) is refused when the file is
// opened, before validation would scan fill values: a file of a few KiB
// claiming 2^40 rows would otherwise keep every rank busy for days.
TEST(H5DatasetReadPaths, UnwrittenDataIsRefusedAtOpen) {
  TempDir dir;
  struct Case {
    const char* name;
    hsize_t rows, chunk_rows;  // chunk_rows 0: contiguous
    hsize_t written_rows;
    const char* want;
  };
  const Case cases[] = {
      {"claim.h5", hsize_t(1) << 40, 1, 0, "/train/x: only 0 of its 1099511627776 chunks were ever written"},
      {"partial.h5", 100, 10, 45, "/train/x: only 5 of its 10 chunks were ever written"},
      {"contiguous.h5", 100, 0, 0, "/train/x: its data was never written"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.file(c.name);
    {
      H5Handle f = H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
      H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
      H5Pset_create_intermediate_group(lcpl.id(), 1);
      H5Handle dcpl = H5Handle::plist(H5Pcreate(H5P_DATASET_CREATE));
      const hsize_t dims[2] = {c.rows, 3}, chunk[2] = {c.chunk_rows, 3};
      if (c.chunk_rows) H5Pset_chunk(dcpl.id(), 2, chunk);
      H5Handle xs = H5Handle::space(H5Screate_simple(2, dims, nullptr));
      H5Handle x = H5Handle::dataset(
          H5Dcreate2(f.id(), "/train/x", H5T_IEEE_F32LE, xs.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT));
      ASSERT_TRUE(x.valid()) << c.name;
      if (c.written_rows) {
        const hsize_t start[2] = {0, 0}, count[2] = {c.written_rows, 3};
        H5Sselect_hyperslab(xs.id(), H5S_SELECT_SET, start, nullptr, count, nullptr);
        H5Handle ms = H5Handle::space(H5Screate_simple(2, count, nullptr));
        const std::vector<float> ones(c.written_rows * 3, 1.0f);
        ASSERT_GE(H5Dwrite(x.id(), H5T_NATIVE_FLOAT, ms.id(), xs.id(), H5P_DEFAULT, ones.data()), 0);
      }
      H5Handle ydcpl = H5Handle::plist(H5Pcreate(H5P_DATASET_CREATE));
      if (c.chunk_rows) H5Pset_chunk(ydcpl.id(), 1, chunk);
      H5Handle ys = H5Handle::space(H5Screate_simple(1, dims, nullptr));
      H5Handle y = H5Handle::dataset(
          H5Dcreate2(f.id(), "/train/y", H5T_STD_I32LE, ys.id(), lcpl.id(), ydcpl.id(), H5P_DEFAULT));
      ASSERT_TRUE(y.valid()) << c.name;
    }
    for (bool mmap : {true, false}) {
      try {
        const H5Dataset ds(path, "train", OpenOptions{true, mmap});
        ADD_FAILURE() << c.name << ": unwritten data accepted";
      } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << e.what();
      }
    }
  }
}

TEST(SampleSource, ScanRowsVisitsEveryRowOnceInBlocks) {
  TempDir dir;
  const Data d = make_data(1000, 5, 4);
  write_file(dir.file("c.h5"), d, {});
  write_file(dir.file("z.h5"), d, {Layout::ChunkedGzip});
  for (const char* f : {"c.h5", "z.h5"}) {
    auto lock = h5_lock();
    H5Handle file = h5_open_read_only(dir.file(f));
    auto src = open_source(file.id(), SourceRequest{"/train/x", H5T_NATIVE_UINT8, 1000, 5, true, f});
    std::vector<uint8_t> seen;
    int blocks = 0;
    scan_rows(
        *src, 10, 990,
        [&](const std::byte* rows, int64_t first, int64_t count) {
          EXPECT_EQ(first, 10 + static_cast<int64_t>(seen.size()) / 5);
          const auto* b = reinterpret_cast<const uint8_t*>(rows);
          seen.insert(seen.end(), b, b + count * 5);
          ++blocks;
        },
        /*block_bytes=*/1000);
    EXPECT_EQ(blocks, 5) << "990 rows of 5 bytes in blocks of 200 rows";
    EXPECT_TRUE(std::equal(seen.begin(), seen.end(), d.xu8.begin() + 50)) << f;
  }
}

TEST(H5DatasetReadPaths, ExternalLinksAreReadThroughHdf5) {
  // /train/x of outer.h5 is an external link into data.h5 (HDF5 resolves the
  // target's path by its own rules, so it is not mapped), with the same values.
  TempDir dir;
  const Data d = make_data(64, 5, 6);
  write_file(dir.file("data.h5"), d, {});
  {
    H5Handle f =
        H5Handle::file(H5Fcreate(dir.file("outer.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    H5Handle g = H5Handle::group(H5Gcreate2(f.id(), "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(
        H5Lcreate_external(dir.file("data.h5").c_str(), "/train/x", g.id(), "x", H5P_DEFAULT, H5P_DEFAULT),
        0);
    const hsize_t n = 64;
    H5Handle s = H5Handle::space(H5Screate_simple(1, &n, nullptr));
    H5Handle y = H5Handle::dataset(
        H5Dcreate2(g.id(), "y", H5T_STD_I32LE, s.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Dwrite(y.id(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.labels.data());
  }
  const H5Dataset outer(dir.file("outer.h5"), "train"), direct(dir.file("data.h5"), "train");
  ASSERT_EQ(outer.unmapped().size(), 1u);
  EXPECT_NE(outer.unmapped()[0].find("external link"), std::string::npos) << outer.unmapped()[0];
  const std::vector<int64_t> idx = {63, 0, 5, 5, 31};
  EXPECT_EQ(gather_all(outer, idx), gather_all(direct, idx));
}
