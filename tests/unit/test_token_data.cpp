// TokenDataset: token files written here with the HDF5 C API read back as
// the windows of token_dataset.h (x = tokens[iT, iT+T), y = the next token
// at each position) on the mapped and the H5Dread path alike; windows are
// disjoint in their inputs and, through the DistributedSampler and the
// Loader, disjoint across ranks, ordered by (seed, epoch) and resumable
// exactly; bad files and bad tokens are one UserError line naming the
// file and the token's index.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "data/h5_handle.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/token_dataset.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::UserError;
using hpc::data::DistributedSampler;
using hpc::data::H5Handle;
using hpc::data::OpenOptions;
using hpc::data::PadMode;
using hpc::data::TokenDataset;

namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hpctrain-test-tokens.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct TokenSpec {
  std::string name = "/train/tokens";
  std::vector<uint16_t> tokens;
  double vocab = 256;  // < 0: no vocab_size attribute
  bool chunked = false;
  std::vector<uint32_t> wide{};  // non-empty: these, stored as uint32, instead of `tokens`
};

// Writes the given token datasets (uint16, contiguous unless chunked) into `path`.
void write_tokens(const std::string& path, const std::vector<TokenSpec>& specs) {
  H5Handle file = H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(file.valid());
  for (const TokenSpec& s : specs) {
    H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.id(), 1);
    hsize_t dims[1] = {s.tokens.size()};
    H5Handle space = H5Handle::space(H5Screate_simple(1, dims, nullptr));
    H5Handle dcpl = H5Handle::plist(H5Pcreate(H5P_DATASET_CREATE));
    if (s.chunked) {
      hsize_t chunk[1] = {7};  // odd on purpose: windows straddle chunks
      H5Pset_chunk(dcpl.id(), 1, chunk);
    }
    const bool wide = !s.wide.empty();
    if (wide) dims[0] = s.wide.size();
    if (wide) space = H5Handle::space(H5Screate_simple(1, dims, nullptr));
    H5Handle d = H5Handle::dataset(H5Dcreate2(file.id(), s.name.c_str(), wide ? H5T_STD_U32LE : H5T_STD_U16LE,
                                              space.id(), lcpl.id(), dcpl.id(), H5P_DEFAULT));
    ASSERT_TRUE(d.valid()) << s.name;
    if (wide)
      H5Dwrite(d.id(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.wide.data());
    else
      H5Dwrite(d.id(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, s.tokens.data());
    if (s.vocab >= 0) {
      H5Handle as = H5Handle::space(H5Screate(H5S_SCALAR));
      H5Handle a =
          H5Handle::attr(H5Acreate2(d.id(), "vocab_size", H5T_STD_I64LE, as.id(), H5P_DEFAULT, H5P_DEFAULT));
      H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &s.vocab);
    }
  }
}

// A recognisable stream: token k is a function of k, below 251.
std::vector<uint16_t> stream(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) t[static_cast<size_t>(k)] = static_cast<uint16_t>((k * 37 + 11) % 251);
  return t;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenData, WindowsHoldTheTokensAndTheirSuccessors) {
  TempDir dir;
  const int64_t t = 5, n = 23;  // (23 - 1) / 5 = 4 windows; tokens 21, 22 only as the last target / unused
  const std::vector<uint16_t> tokens = stream(n);
  for (bool chunked : {false, true}) {
    const std::string path = dir.file(chunked ? "chunked.h5" : "plain.h5");
    write_tokens(path, {{"/train/tokens", tokens, 256, chunked}});
    TokenDataset ds(path, "train", t);
    EXPECT_EQ(ds.mapped(), !chunked);
    EXPECT_EQ(ds.info().size, 4);
    EXPECT_EQ(ds.info().sample_shape, Shape{t});
    EXPECT_EQ(ds.info().target_shape, Shape{t});
    EXPECT_EQ(ds.vocab(), 256);
    EXPECT_EQ(ds.num_tokens(), n);
    const std::vector<int64_t> idx = {2, 0, 3, 2};  // any order, repeats allowed
    for (DType xt : {DType::F32, DType::F64}) {
      Tensor x(Shape{4, t}, xt), y(Shape{4, t}, DType::I32);
      ds.gather(idx.data(), 4, x, y);
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < t; ++j) {
          const double want_x = tokens[static_cast<size_t>(idx[i] * t + j)];
          EXPECT_EQ(xt == DType::F32 ? x.data<float>()[i * t + j] : x.data<double>()[i * t + j], want_x);
          EXPECT_EQ(y.data<int32_t>()[i * t + j], tokens[static_cast<size_t>(idx[i] * t + j + 1)])
              << "chunked " << chunked << " window " << idx[i] << " position " << j;
        }
    }
  }
}

// uint32 ids (vocabularies above 65,536, e.g. Llama 3's 128,256), mapped and through H5Dread.
TEST(TokenData, Uint32IdsAboveSixteenBits) {
  TempDir dir;
  const int64_t t = 4, n = 21;
  std::vector<uint32_t> tokens;
  for (int64_t k = 0; k < n; ++k) tokens.push_back(static_cast<uint32_t>((k * 40009) % 128256));
  tokens[3] = 128255;
  for (bool chunked : {false, true}) {
    const std::string path = dir.file(chunked ? "wide_chunked.h5" : "wide.h5");
    write_tokens(path, {{"/train/tokens", {}, 128256, chunked, tokens}});
    TokenDataset ds(path, "train", t);
    EXPECT_EQ(ds.token_type(), hpc::data::TokenType::U32);
    EXPECT_EQ(ds.mapped(), !chunked);
    EXPECT_EQ(ds.vocab(), 128256);
    const std::vector<int64_t> idx = {0, 4, 2};
    Tensor x(Shape{3, t}, DType::F32), y(Shape{3, t}, DType::I32);
    ds.gather(idx.data(), 3, x, y);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < t; ++j) {
        EXPECT_EQ(x.data<float>()[i * t + j],
                  static_cast<float>(tokens[static_cast<size_t>(idx[i] * t + j)]));
        EXPECT_EQ(y.data<int32_t>()[i * t + j],
                  static_cast<int32_t>(tokens[static_cast<size_t>(idx[i] * t + j + 1)]));
      }
    EXPECT_NE(ds.describe().find("(uint32)"), std::string::npos) << ds.describe();
  }
  const std::string small = dir.file("small.h5");
  write_tokens(small, {{"/train/tokens", {}, 128255, false, tokens}});
  EXPECT_EQ(error_of([&] { TokenDataset(small, "train", t); }),
            "data file '" + small +
                "': /train/tokens: token 128255 at index 3 is outside [0, 128255) (the vocab_size "
                "attribute of /train/tokens)");
}

TEST(TokenData, InputsOfWindowsAreDisjointAndCoverTheStream) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const int64_t t = 8;
  write_tokens(path, {{"/train/tokens", stream(8 * 30 + 1)}});
  TokenDataset ds(path, "train", t);
  ASSERT_EQ(ds.info().size, 30);  // 241 tokens: exactly 30 windows of 8 + 1
  // Position of every input token: with a stream whose tokens identify their
  // position modulo 251 (> 241), the inputs of all windows are each position once.
  std::set<int64_t> seen;
  std::vector<int64_t> all(30);
  for (int64_t i = 0; i < 30; ++i) all[static_cast<size_t>(i)] = i;
  Tensor x(Shape{30, t}, DType::F32), y(Shape{30, t}, DType::I32);
  ds.gather(all.data(), 30, x, y);
  const std::vector<uint16_t> tokens = stream(241);
  for (int64_t k = 0; k < 30 * t; ++k) {
    const auto pos = std::find(tokens.begin(), tokens.end(), static_cast<uint16_t>(x.data<float>()[k]));
    EXPECT_TRUE(seen.insert(pos - tokens.begin()).second) << "token position used twice";
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), 30 * t);
  EXPECT_EQ(*seen.rbegin(), 30 * t - 1);
}

// Which token positions (as inputs) rank r sees in an epoch of a W-rank sampler.
std::vector<int64_t> rank_positions(const DistributedSampler& s, int64_t epoch, int64_t t) {
  std::vector<int64_t> out, idx(static_cast<size_t>(s.batch_per_rank()));
  for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
    s.indices(epoch, b, idx.data());
    for (int64_t w : idx)
      for (int64_t j = 0; j < t; ++j) out.push_back(w * t + j);
  }
  return out;
}

TEST(TokenData, RanksSeeDisjointWindowsInAnOrderFixedBySeedAndEpoch) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  const int64_t t = 4;
  write_tokens(path, {{"/train/tokens", stream(4 * 40 + 1)}});
  TokenDataset ds(path, "train", t);
  const int64_t windows = ds.info().size;
  DistributedSampler r0(windows, 3, 2, 0, 7, true, PadMode::Drop),
      r1(windows, 3, 2, 1, 7, true, PadMode::Drop);
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> a = rank_positions(r0, epoch, t), b = rank_positions(r1, epoch, t);
    std::set<int64_t> both(a.begin(), a.end());
    both.insert(b.begin(), b.end());
    EXPECT_EQ(both.size(), a.size() + b.size()) << "a token position on both ranks in epoch " << epoch;
    EXPECT_EQ(static_cast<int64_t>(both.size()), r0.batches_per_epoch() * r0.global_batch() * t);
  }
  // The same (seed, epoch): the same order; another epoch or seed: another one.
  DistributedSampler again(windows, 3, 2, 0, 7, true, PadMode::Drop),
      other(windows, 3, 2, 0, 8, true, PadMode::Drop);
  EXPECT_EQ(rank_positions(r0, 1, t), rank_positions(again, 1, t));
  EXPECT_NE(rank_positions(r0, 0, t), rank_positions(r0, 1, t));
  EXPECT_NE(rank_positions(r0, 0, t), rank_positions(other, 0, t));
}

// The batches a loader serves for items [first, end) of a plan over `sampler`.
std::vector<std::vector<float>> served(const TokenDataset& ds, const DistributedSampler& sampler,
                                       int64_t first, int64_t end) {
  hpc::data::Loader loader(ds, sampler.batch_per_rank(), hpc::data::LoaderOptions{2, 2, nullptr});
  const int64_t per_epoch = sampler.batches_per_epoch();
  loader.start(first, end, [&](int64_t item, int64_t* out) {
    return sampler.indices(item / per_epoch, item % per_epoch, out);
  });
  std::vector<std::vector<float>> out;
  for (int64_t i = first; i < end; ++i) {
    const hpc::data::Batch& b = loader.next();
    EXPECT_EQ(b.y.shape(), (Shape{sampler.batch_per_rank(), ds.context()}));
    std::vector<float> v(b.x.data<float>(), b.x.data<float>() + b.x.count());
    for (int64_t k = 0; k < b.y.count(); ++k) v.push_back(static_cast<float>(b.y.data<int32_t>()[k]));
    out.push_back(std::move(v));
  }
  return out;
}

TEST(TokenData, ResumeContinuesWithExactlyTheSameBatches) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  write_tokens(path, {{"/train/tokens", stream(6 * 50 + 3)}});
  TokenDataset ds(path, "train", 6);
  DistributedSampler sampler(ds.info().size, 4, 1, 0, 3, true, PadMode::Drop);
  const int64_t per_epoch = sampler.batches_per_epoch(), total = 3 * per_epoch;
  const std::vector<std::vector<float>> straight = served(ds, sampler, 0, total);
  // Stopped after step k (mid-epoch); the checkpoint holds (epoch, consumed samples).
  const int64_t k = per_epoch + 5;
  const hpc::data::SamplerCursor at =
      sampler.cursor_at(k / per_epoch, (k % per_epoch) * sampler.global_batch());
  DistributedSampler fresh(ds.info().size, 4, 1, 0, 3, true, PadMode::Drop);
  const std::vector<std::vector<float>> resumed = served(ds, fresh, at.epoch * per_epoch + at.batch, total);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(total - k));
  for (int64_t i = k; i < total; ++i)
    EXPECT_EQ(resumed[static_cast<size_t>(i - k)], straight[static_cast<size_t>(i)]);
}

TEST(TokenData, VocabularyComesFromTheAttributeOrTheLargestToken) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  std::vector<uint16_t> tokens = stream(40);
  tokens[17] = 300;
  write_tokens(path, {{"/train/tokens", tokens, -1}, {"/val/tokens", stream(20), -1}});
  TokenDataset train(path, "train", 4);
  EXPECT_EQ(train.vocab(), 301);
  EXPECT_EQ(train.vocab_source(), "largest token of /train/tokens + 1");
  EXPECT_TRUE(TokenDataset::is_token_file(path));
  EXPECT_TRUE(TokenDataset::has_tokens(path, "val"));

  const std::string with_attr = dir.file("a.h5");
  write_tokens(with_attr, {{"/train/tokens", stream(40), 260}, {"/val/tokens", stream(20), -1}});
  TokenDataset val(with_attr, "val", 4);
  EXPECT_EQ(val.vocab(), 260);  // the val split takes the train split's vocabulary
  EXPECT_EQ(val.vocab_source(), "the vocab_size attribute of /train/tokens");
}

TEST(TokenData, BadFilesAreOneLineNamingFileAndProblem) {
  TempDir dir;
  const std::string big = dir.file("big.h5");
  std::vector<uint16_t> tokens = stream(40);
  tokens[17] = 256;
  write_tokens(big, {{"/train/tokens", tokens}});
  EXPECT_EQ(error_of([&] { TokenDataset(big, "train", 4); }),
            "data file '" + big +
                "': /train/tokens: token 256 at index 17 is outside [0, 256) (the vocab_size attribute of "
                "/train/tokens)");

  const std::string short_file = dir.file("short.h5");
  write_tokens(short_file, {{"/train/tokens", stream(8)}});
  EXPECT_NE(error_of([&] {
              TokenDataset(short_file, "train", 8);
            }).find("/train/tokens holds 8 tokens, fewer than one window of 9 (model.context 8 + 1)"),
            std::string::npos);
  EXPECT_NO_THROW(TokenDataset(short_file, "train", 7));

  EXPECT_NE(error_of([&] { TokenDataset(short_file, "val", 4); }).find("/val/tokens is missing"),
            std::string::npos);

  const std::string floats = dir.file("floats.h5");
  {
    H5Handle file = H5Handle::file(H5Fcreate(floats.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.id(), 1);
    hsize_t dims[2] = {10, 2};
    H5Handle space = H5Handle::space(H5Screate_simple(1, dims, nullptr));
    H5Handle d = H5Handle::dataset(H5Dcreate2(file.id(), "/train/tokens", H5T_IEEE_F32LE, space.id(),
                                              lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
    H5Handle space2 = H5Handle::space(H5Screate_simple(2, dims, nullptr));
    H5Handle d2 = H5Handle::dataset(H5Dcreate2(file.id(), "/val/tokens", H5T_STD_U16LE, space2.id(),
                                               lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
  }
  EXPECT_EQ(error_of([&] { TokenDataset(floats, "train", 2); }),
            "data file '" + floats + "': /train/tokens is float32; tokens must be uint16, uint32 or int32");
  EXPECT_EQ(error_of([&] { TokenDataset(floats, "val", 2); }),
            "data file '" + floats + "': /val/tokens has 2 dimensions; tokens must be 1-D");
  EXPECT_NE(error_of([&] { TokenDataset(dir.file("missing.h5"), "train", 2); }).find("missing.h5"),
            std::string::npos);
}

TEST(TokenData, ABadTokenPastTheQuickScanFailsInGatherOrWithTheFullCheck) {
  TempDir dir;
  const std::string path = dir.file("d.h5");
  std::vector<uint16_t> tokens = stream(6000);
  tokens[5000] = 999;  // the quick scan covers 4096 windows of 1 token + 1
  write_tokens(path, {{"/train/tokens", tokens}});
  EXPECT_NE(error_of([&] {
              TokenDataset(path, "train", 1, OpenOptions{true, true});
            }).find("token 999 at index 5000"),
            std::string::npos);
  for (bool mmap : {true, false}) {
    TokenDataset quick(path, "train", 1, OpenOptions{false, mmap});
    Tensor x(Shape{2, 1}, DType::F32), y(Shape{2, 1}, DType::I32);
    const int64_t good[2] = {3, 4998}, bad[2] = {3, 4999};  // window 4999's target is token 5000
    EXPECT_NO_THROW(quick.gather(good, 2, x, y));
    EXPECT_NE(
        error_of([&] { quick.gather(bad, 2, x, y); }).find("token 999 at index 5000 is outside [0, 256)"),
        std::string::npos)
        << "mmap " << mmap;
  }
}

}  // namespace
