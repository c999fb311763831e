// H5Dataset: files written here with the HDF5 C API (the layout of docs/data.md)
// read back with the right values, shapes and num_classes; every kind of bad
// file is refused up front with one UserError line naming file and problem;
// HDF5's own error stack never reaches stderr; H5Handle closes what it owns.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "data/h5_dataset.h"
#include "data/h5_handle.h"
#include "temp_dir.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::UserError;
using hpc::data::H5Dataset;
using hpc::data::H5Handle;

namespace {

namespace fs = std::filesystem;
using hpc::test::TempDir;

// A file under construction; each call writes one dataset or attribute.
class Writer {
 public:
  explicit Writer(const std::string& path)
      : file_(H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT))) {}

  template <typename T>
  Writer& dataset(const std::string& name, hid_t file_type, hid_t mem_type, std::vector<hsize_t> dims,
                  const std::vector<T>& values) {
    H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.id(), 1);
    H5Handle space = H5Handle::space(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
    H5Handle d = H5Handle::dataset(
        H5Dcreate2(file_.id(), name.c_str(), file_type, space.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
    EXPECT_TRUE(d.valid()) << name;
    if (!values.empty()) H5Dwrite(d.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    return *this;
  }
  Writer& f32(const std::string& name, std::vector<hsize_t> dims, const std::vector<float>& v) {
    return dataset(name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, std::move(dims), v);
  }
  Writer& u8(const std::string& name, std::vector<hsize_t> dims, const std::vector<uint8_t>& v) {
    return dataset(name, H5T_STD_U8LE, H5T_NATIVE_UINT8, std::move(dims), v);
  }
  Writer& i32(const std::string& name, const std::vector<int32_t>& v) {
    return dataset(name, H5T_STD_I32LE, H5T_NATIVE_INT32, {v.size()}, v);
  }
  Writer& attr(const std::string& ds, const char* name, double v, hid_t type = H5T_IEEE_F64LE) {
    H5Handle d = H5Handle::dataset(H5Dopen2(file_.id(), ds.c_str(), H5P_DEFAULT));
    H5Handle space = H5Handle::space(H5Screate(H5S_SCALAR));
    H5Handle a = H5Handle::attr(H5Acreate2(d.id(), name, type, space.id(), H5P_DEFAULT, H5P_DEFAULT));
    H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &v);
    return *this;
  }

 private:
  H5Handle file_;
};

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.25f * float(i) - 3.0f;
  return v;
}

// The UserError message of opening `split` of `path`, or "" when it opens.
std::string open_error(const std::string& path, const std::string& split = "train", bool full = false) {
  try {
    H5Dataset ds(path, split, full);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// The message must exist, be one line, name the file and contain `needle`.
void expect_error(const std::string& path, const std::string& needle, const std::string& split = "train",
                  bool full = false) {
  const std::string msg = open_error(path, split, full);
  ASSERT_FALSE(msg.empty()) << path << " opened without error, expected: " << needle;
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

}  // namespace

TEST(H5Dataset, Float32WithValReadsValuesShapesAndClasses) {
  TempDir dir;
  const std::string path = dir.file("f32.h5");
  const std::vector<float> x = ramp(5 * 2 * 3, 0), vx = ramp(2 * 6, 100);
  Writer(path)
      .f32("/train/x", {5, 2, 3}, x)
      .i32("/train/y", {3, 0, 6, 1, 2})
      .f32("/val/x", {2, 2, 3}, vx)
      .i32("/val/y", {1, 5});

  H5Dataset train(path, "train");
  EXPECT_EQ(train.info().size, 5);
  EXPECT_EQ(train.info().sample_shape, (Shape{2, 3}));
  EXPECT_EQ(train.info().x_dtype, DType::F32);
  EXPECT_TRUE(train.info().classification);
  EXPECT_EQ(train.info().num_classes, 7);  // no attribute: max train label + 1

  const int64_t idx[] = {4, 0, 2};
  Tensor bx(Shape{3, 2, 3}, DType::F32), by(Shape{3}, DType::I32);
  train.gather(idx, 3, bx, by);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 6; ++j) EXPECT_EQ(bx.data<float>()[i * 6 + j], x[idx[i] * 6 + j]) << i << "," << j;
  EXPECT_EQ(by.data<int32_t>()[0], 2);
  EXPECT_EQ(by.data<int32_t>()[1], 3);
  EXPECT_EQ(by.data<int32_t>()[2], 6);

  // float64 output (gradient checks) widens exactly; a flattened [n, 6] view is accepted too.
  Tensor dx(Shape{3, 6}, DType::F64);
  train.gather(idx, 3, dx, by);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(dx.data<double>()[6 + j], double(x[j]));

  ASSERT_TRUE(H5Dataset::has_split(path, "val"));
  H5Dataset val(path, "val");
  EXPECT_EQ(val.info().size, 2);
  EXPECT_EQ(val.info().num_classes, 7);  // from train, although val's labels only reach 5
  const int64_t one[] = {1};
  Tensor vb(Shape{1, 2, 3}, DType::F32), vy(Shape{1}, DType::I32);
  val.gather(one, 1, vb, vy);
  EXPECT_EQ(vb.data<float>()[0], vx[6]);
  EXPECT_EQ(vy.data<int32_t>()[0], 5);
}

TEST(H5Dataset, Uint8IsScaledWithScaleMeanStd) {
  TempDir dir;
  const std::string path = dir.file("u8.h5");
  std::vector<uint8_t> x(4 * 1 * 2 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 17);  // 0 … 255
  const double scale = 1.0 / 255, mean = 0.1307, std = 0.3081;
  Writer(path)
      .u8("/train/x", {4, 1, 2, 2}, x)
      .attr("/train/x", "scale", scale)
      .attr("/train/x", "mean", mean)
      .attr("/train/x", "std", std, H5T_IEEE_F32LE)  // any float attribute type is read
      .i32("/train/y", {0, 1, 2, 3});

  H5Dataset ds(path, "train");
  EXPECT_EQ(ds.info().x_dtype, DType::U8);
  EXPECT_EQ(ds.info().sample_shape, (Shape{1, 2, 2}));
  const double std_read = double(float(std));  // stored as float32 above
  const int64_t idx[] = {3, 1};
  Tensor f(Shape{2, 1, 2, 2}, DType::F32), d(Shape{2, 1, 2, 2}, DType::F64), y(Shape{2}, DType::I32);
  ds.gather(idx, 2, f, y);
  ds.gather(idx, 2, d, y);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const double want = (x[idx[i] * 4 + j] * scale - mean) / std_read;
      // float32: within one rounding of the exact value; float64: a few ulps.
      EXPECT_NEAR(f.data<float>()[i * 4 + j], want, 1e-6 * std::max(1.0, std::abs(want)));
      EXPECT_NEAR(d.data<double>()[i * 4 + j], want, 1e-12);
    }
  EXPECT_EQ(y.data<int32_t>()[0], 3);
}

TEST(H5Dataset, Uint8WithoutAttributesIsTheByteValue) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  Writer(path).u8("/train/x", {2, 3}, {0, 7, 255, 1, 2, 3}).i32("/train/y", {0, 0});
  H5Dataset ds(path, "train");
  const int64_t idx[] = {0};
  Tensor x(Shape{1, 3}, DType::F32), y(Shape{1}, DType::I32);
  ds.gather(idx, 1, x, y);
  EXPECT_EQ(x.data<float>()[1], 7.0f);
  EXPECT_EQ(x.data<float>()[2], 255.0f);
  EXPECT_EQ(ds.info().num_classes, 1);
}

TEST(H5Dataset, BigEndianFloatsAreConverted) {
  TempDir dir;
  const std::string path = dir.file("be.h5");
  const std::vector<float> x = {1.5f, -2.25f, 3e-5f, 1e6f};
  Writer(path).dataset("/train/x", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, {2, 2}, x).i32("/train/y", {0, 1});
  H5Dataset ds(path, "train");
  const int64_t idx[] = {1, 0};
  Tensor bx(Shape{2, 2}, DType::F32), by(Shape{2}, DType::I32);
  ds.gather(idx, 2, bx, by);
  EXPECT_EQ(bx.data<float>()[0], 3e-5f);
  EXPECT_EQ(bx.data<float>()[3], -2.25f);
}

TEST(H5Dataset, NumClassesAttributeWinsAndValFollowsTrain) {
  TempDir dir;
  const std::string path = dir.file("nc.h5");
  Writer(path)
      .f32("/train/x", {3, 2}, ramp(6, 0))
      .i32("/train/y", {0, 1, 2})
      .attr("/train/y", "num_classes", 10, H5T_STD_I64LE)
      .f32("/val/x", {2, 2}, ramp(4, 0))
      .i32("/val/y", {9, 4});
  EXPECT_EQ(H5Dataset(path, "train").info().num_classes, 10);
  EXPECT_EQ(H5Dataset(path, "val").info().num_classes, 10);  // label 9 valid: train says 10 classes

  // Without the attribute, train's labels (max 2) define 3 classes, and val's 9 is out of range.
  const std::string bare = dir.file("nc_bare.h5");
  Writer(bare)
      .f32("/train/x", {3, 2}, ramp(6, 0))
      .i32("/train/y", {0, 1, 2})
      .f32("/val/x", {2, 2}, ramp(4, 0))
      .i32("/val/y", {9, 4});
  expect_error(bare, "/val/y: label 9 at sample 0 is outside [0, 3)", "val");

  // Disagreeing attributes are a broken file, not a choice to make silently.
  const std::string clash = dir.file("nc_clash.h5");
  Writer(clash)
      .f32("/train/x", {1, 2}, ramp(2, 0))
      .i32("/train/y", {0})
      .attr("/train/y", "num_classes", 10)
      .f32("/val/x", {1, 2}, ramp(2, 0))
      .i32("/val/y", {0})
      .attr("/val/y", "num_classes", 5);
  expect_error(clash, "num_classes is 5 on /val/y but 10 on /train/y", "val");
}

TEST(H5Dataset, RegressionTargets) {
  TempDir dir;
  const std::string path = dir.file("reg.h5");
  const std::vector<float> t = ramp(4 * 3, 1);
  Writer(path).f32("/train/x", {4, 2}, ramp(8, 0)).f32("/train/y", {4, 3}, t);
  H5Dataset ds(path, "train");
  EXPECT_FALSE(ds.info().classification);
  EXPECT_EQ(ds.info().num_classes, 0);
  EXPECT_EQ(ds.info().target_shape, (Shape{3}));
  const int64_t idx[] = {2, 3};
  Tensor x(Shape{2, 2}, DType::F32), y(Shape{2, 3}, DType::F64);
  ds.gather(idx, 2, x, y);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(y.data<double>()[j], double(t[6 + j]));
    EXPECT_EQ(y.data<double>()[3 + j], double(t[9 + j]));
  }

  // A 1-D float y is one target per sample.
  const std::string one = dir.file("reg1.h5");
  Writer(one).f32("/train/x", {2, 2}, ramp(4, 0)).f32("/train/y", {2}, {0.5f, 1.5f});
  EXPECT_EQ(H5Dataset(one, "train").info().target_shape, (Shape{1}));
}

TEST(H5Dataset, HasSplit) {
  TempDir dir;
  const std::string path = dir.file("split.h5");
  Writer(path).f32("/train/x", {1, 1}, {0}).i32("/train/y", {0});
  EXPECT_TRUE(H5Dataset::has_split(path, "train"));
  EXPECT_FALSE(H5Dataset::has_split(path, "val"));
  EXPECT_THROW(H5Dataset::has_split(dir.file("absent.h5"), "val"), UserError);
}

TEST(H5Dataset, RejectsBadFilesWithOneLineNamingTheProblem) {
  TempDir dir;
  auto file = [&](const std::string& name) { return dir.file(name); };

  Writer(file("no_y.h5")).f32("/train/x", {2, 1}, {0, 1});
  expect_error(file("no_y.h5"), "/train/y is missing");

  Writer(file("no_train.h5")).f32("/val/x", {2, 1}, {0, 1}).i32("/val/y", {0, 1});
  expect_error(file("no_train.h5"), "/train/x is missing");

  Writer(file("mismatch.h5")).f32("/train/x", {5, 1}, ramp(5, 0)).i32("/train/y", {0, 1, 0, 1});
  expect_error(file("mismatch.h5"), "/train/x has 5 samples but /train/y has 4");

  Writer(file("range.h5"))
      .f32("/train/x", {3, 1}, ramp(3, 0))
      .i32("/train/y", {0, 3, 1})
      .attr("/train/y", "num_classes", 3);
  expect_error(file("range.h5"), "label 3 at sample 1 is outside [0, 3)");

  Writer(file("negative.h5")).f32("/train/x", {2, 1}, ramp(2, 0)).i32("/train/y", {1, -1});
  expect_error(file("negative.h5"), "label -1 at sample 1");

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Writer(file("nan.h5")).f32("/train/x", {3, 2}, {0, 1, 2, nan, 4, 5}).i32("/train/y", {0, 1, 0});
  expect_error(file("nan.h5"), "/train/x: sample 1 contains NaN");

  Writer(file("inf.h5")).f32("/train/x", {2, 1}, {inf, 0}).i32("/train/y", {0, 1});
  expect_error(file("inf.h5"), "sample 0 contains Inf");

  Writer(file("nan_target.h5")).f32("/train/x", {2, 1}, {0, 1}).f32("/train/y", {2}, {0, nan});
  expect_error(file("nan_target.h5"), "/train/y: sample 1 contains NaN");

  Writer(file("empty.h5")).f32("/train/x", {0, 3}, {}).i32("/train/y", {});
  expect_error(file("empty.h5"), "no samples");

  Writer(file("rank1.h5")).f32("/train/x", {3}, {0, 1, 2}).i32("/train/y", {0, 1, 2});
  expect_error(file("rank1.h5"), "rank >= 2");

  Writer(file("f64.h5"))
      .dataset("/train/x", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1, 1}, std::vector<double>{0})
      .i32("/train/y", {0});
  expect_error(file("f64.h5"), "/train/x is float64; x must be float32 or uint8");

  Writer(file("i64.h5"))
      .f32("/train/x", {1, 1}, {0})
      .dataset("/train/y", H5T_STD_I64LE, H5T_NATIVE_INT64, {1}, std::vector<int64_t>{0});
  expect_error(file("i64.h5"), "/train/y is int64");

  Writer(file("std0.h5")).u8("/train/x", {1, 1}, {0}).attr("/train/x", "std", 0).i32("/train/y", {0});
  expect_error(file("std0.h5"), "'std' is 0");

  std::ofstream(file("text.h5")) << "this is not HDF5\n";
  expect_error(file("text.h5"), "not an HDF5 file");

  expect_error(file("absent.h5"), "no such file");

  // Truncated: a valid file cut in half (e.g. a copy that ran out of quota).
  const std::string whole = file("whole.h5"), cut = file("cut.h5");
  Writer(whole).f32("/train/x", {256, 8}, ramp(2048, 0)).i32("/train/y", std::vector<int32_t>(256, 0));
  ASSERT_EQ(open_error(whole), "");
  fs::copy_file(whole, cut);
  fs::resize_file(cut, fs::file_size(whole) / 2);
  expect_error(cut, "truncated");
}

TEST(H5Dataset, QuickCheckScansTheFirst4096SamplesFullCheckAll) {
  TempDir dir;
  const std::string path = dir.file("late_nan.h5");
  std::vector<float> x(5000, 1.0f);
  x[4500] = std::numeric_limits<float>::quiet_NaN();
  Writer(path).f32("/train/x", {5000, 1}, x).i32("/train/y", std::vector<int32_t>(5000, 0));
  EXPECT_EQ(open_error(path, "train", false), "");
  expect_error(path, "sample 4500 contains NaN", "train", /*full=*/true);
}

TEST(H5Dataset, HdfErrorStackIsNotPrinted) {
  TempDir dir;
  const std::string path = dir.file("quiet.h5");
  Writer(path).f32("/train/x", {64, 4}, ramp(256, 0)).i32("/train/y", std::vector<int32_t>(64, 0));
  fs::resize_file(path, fs::file_size(path) / 2);
  testing::internal::CaptureStderr();
  const std::string msg = open_error(path);
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(printed, "");
}

TEST(H5Dataset, GatherRejectsProgrammingErrorsAsInternal) {
  TempDir dir;
  const std::string path = dir.file("g.h5");
  Writer(path).f32("/train/x", {2, 3}, ramp(6, 0)).i32("/train/y", {0, 1});
  H5Dataset ds(path, "train");
  Tensor x(Shape{1, 3}, DType::F32), y(Shape{1}, DType::I32), wrong(Shape{1, 4}, DType::F32);
  const int64_t bad[] = {2}, good[] = {1};
  try {
    ds.gather(bad, 1, x, y);
    FAIL() << "index out of range accepted";
  } catch (const hpc::Error& e) {
    EXPECT_EQ(e.exit_code(), hpc::EXIT_INTERNAL) << e.what();
  }
  EXPECT_THROW(ds.gather(good, 1, wrong, y), hpc::Error);
  EXPECT_THROW(ds.gather(good, 1, x, Tensor(Shape{1}, DType::F32)), hpc::Error);
}

TEST(H5Handle, ClosesWhatItOwnsAndMovesOwnership) {
  hid_t raw;
  {
    H5Handle space = H5Handle::space(H5Screate(H5S_SCALAR));
    raw = space.id();
    ASSERT_GT(H5Iis_valid(raw), 0);
    H5Handle moved = std::move(space);
    // NOLINTNEXTLINE(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the moved-from state is tested
    EXPECT_FALSE(space.valid());
    EXPECT_EQ(moved.id(), raw);
    EXPECT_GT(H5Iis_valid(raw), 0);
  }
  EXPECT_LE(H5Iis_valid(raw), 0);
}
