// hpcdata repack IN OUT: make any valid dataset file memory-mappable.
//
// Each split is first validated exactly as hpctrain would (so garbage is
// refused, not copied), then its x and y are streamed, a block at a time,
// through the same reader hpctrain uses (SampleSource: native byte order,
// decompressed) into a new file written by the pack pipeline: contiguous,
// little-endian, 4 KiB-aligned, the dtype kept (uint8 stays uint8), with
// scale/mean/std and num_classes carried over. Other objects in IN are
// listed as not copied. A token file (/SPLIT/tokens, `pack --from text`) is
// repacked the same way, ids validated against the vocabulary, vocab_size
// and tokenizer kept, and the tokenizer file (/tokenizer) with them. OUT may be IN itself with --force: the
// new file is renamed over the old one only when complete.
#include <cstdio>
#include <memory>
#include <set>

#include "commands.h"
#include "core/error.h"
#include "data/h5_dataset.h"
#include "data/h5_handle.h"
#include "data/image_dataset.h"
#include "data/sample_source.h"
#include "data/token_dataset.h"

namespace hpc::data_tools {

using data::H5Handle;

namespace {

herr_t collect(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}

// An Array over one dataset of `file`, read through the reader hpctrain uses.
Array source_array(const std::shared_ptr<H5Handle>& file, const std::string& in, const std::string& name,
                   hid_t mem_type, DType dtype, const Shape& shape) {
  const int64_t row_bytes = shape.count() / shape[0] * static_cast<int64_t>(dtype_size(dtype));
  std::shared_ptr<data::SampleSource> src = data::open_source(
      file->id(),
      data::SourceRequest{name, mem_type, shape[0], row_bytes, true, "data file '" + in + "': " + name});
  return Array{dtype, shape, [src, file](int64_t first, int64_t n, void* out) {
                 src->read_range(first, n, static_cast<std::byte*>(out));
               }};
}

Split split_of(const std::shared_ptr<H5Handle>& file, const std::string& in, const data::H5Dataset& ds) {
  const data::SplitInfo& info = ds.info();
  const std::string p = "/" + ds.split();
  Split s;
  s.source = "data file '" + in + "': " + p;
  const bool u8 = info.x_dtype == DType::U8;
  s.x = source_array(file, in, p + "/x", u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, info.x_dtype,
                     info.sample_shape.with_batch(info.size));
  s.y = info.classification ? source_array(file, in, p + "/y", H5T_NATIVE_INT32, DType::I32, Shape{info.size})
                            : source_array(file, in, p + "/y", H5T_NATIVE_FLOAT, DType::F32,
                                           info.target_shape.with_batch(info.size));
  if (u8) {
    s.scale = info.scale;
    s.mean = info.mean;
    s.std = info.std;
    s.channel_mean = info.channel_mean;
    s.channel_std = info.channel_std;
  }
  H5Handle y = H5Handle::dataset(H5Dopen2(file->id(), (p + "/y").c_str(), H5P_DEFAULT));
  if (y.valid()) s.classes = data::h5_string_list_attr(y.id(), "classes");
  return s;
}

// A token file (/SPLIT/tokens): each split validated as hpctrain would (ids inside the vocabulary), then
// streamed through hpctrain's reader into a contiguous dataset of the same dtype, with vocab_size and
// tokenizer carried over, and the stored tokenizer file (/tokenizer) when there is one.
void repack_tokens(const std::string& in, const std::string& out, bool force) {
  std::vector<std::pair<std::string, std::unique_ptr<data::TokenDataset>>> splits;
  for (const char* split : {"train", "val"})
    if (data::TokenDataset::has_tokens(in, split))
      splits.emplace_back(split, std::make_unique<data::TokenDataset>(in, split, 1));
  const std::optional<text::StoredTokenizer> stored = text::read_stored_tokenizer(in);
  DatasetWriter w(out, force);
  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  auto file = std::make_shared<H5Handle>(data::h5_open_read_only(in));
  std::vector<std::string> names;
  for (const auto& [split, ds] : splits) {
    const std::string name = "/" + split + "/tokens";
    const data::TokenType type = ds->token_type();
    // uint32 ids are read as int32 (they are below the vocabulary, < 2^31) and written back as uint32.
    const DType dtype = type == data::TokenType::U16 ? DType::U16 : DType::I32;
    const int64_t n = ds->num_tokens(), esize = static_cast<int64_t>(dtype_size(dtype));
    if (!ds->mapped())
      for (const std::string& u : ds->unmapped()) std::printf("repack: %s → contiguous\n", u.c_str());
    const hid_t native = type == data::TokenType::U16   ? H5T_NATIVE_UINT16
                         : type == data::TokenType::U32 ? H5T_NATIVE_UINT32
                                                        : H5T_NATIVE_INT32;
    Array src = source_array(file, in, name, native, dtype, Shape{n});
    w.create(name, dtype, Shape{n}, type == data::TokenType::U32);
    constexpr int64_t BLOCK = int64_t{1} << 20;
    std::vector<char> buf(static_cast<size_t>(std::min(n, BLOCK) * esize));
    for (int64_t at = 0; at < n; at += BLOCK) {
      const int64_t count = std::min(BLOCK, n - at);
      src.read(at, count, buf.data());
      w.write_rows(name, at, count, buf.data());
    }
    w.set_attr(name, "vocab_size", ds->vocab());
    if (!ds->tokenizer().empty()) w.set_attr(name, "tokenizer", ds->tokenizer());
    names.push_back(name);
  }
  if (stored) write_stored_tokenizer(w, *stored, names);
  w.commit();
  std::printf("wrote %s: token data (%s), contiguous\n", w.path().c_str(),
              splits.size() == 2 ? "train and val" : splits.front().first.c_str());
}

}  // namespace

void repack(const std::string& in, const std::string& out, bool force) {
  if (data::TokenDataset::is_token_file(in)) return repack_tokens(in, out, force);
  if (data::ImageDataset::is_image_file(in))
    throw UserError("data file '" + in +
                    "' holds encoded images (/train/images), which hpcdata pack --from "
                    "image-folder writes contiguous already; repack handles /SPLIT/x and token files");
  // Validate before touching the output: a bad IN leaves no trace.
  std::unique_ptr<data::H5Dataset> train, val;
  if (data::H5Dataset::has_split(in, "train")) train = std::make_unique<data::H5Dataset>(in, "train");
  if (data::H5Dataset::has_split(in, "val")) val = std::make_unique<data::H5Dataset>(in, "val");
  if (!train && !val) throw UserError("data file '" + in + "': no /train or /val split to repack");
  DatasetWriter w(out, force);

  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  auto file = std::make_shared<H5Handle>(data::h5_open_read_only(in));
  std::vector<std::string> links;
  H5Lvisit(file->id(), H5_INDEX_NAME, H5_ITER_INC, collect, &links);
  const std::set<std::string> copied = {"/train", "/train/x", "/train/y", "/val", "/val/x", "/val/y"};
  std::string skipped;
  for (const std::string& l : links) {
    const std::string parent = l.substr(0, l.rfind('/'));
    if (!copied.count(l) &&
        (parent.empty() || copied.count(parent)))  // a skipped group stands for its members
      skipped += (skipped.empty() ? "" : ", ") + l;
  }
  for (const data::H5Dataset* ds : {train.get(), val.get()})
    if (ds && !ds->mapped())
      for (const std::string& u : ds->unmapped()) std::printf("repack: %s → contiguous\n", u.c_str());
  if (!skipped.empty())
    std::printf("repack: not copied (not part of the dataset layout): %s\n", skipped.c_str());

  PackJob job;
  // cppcheck-suppress nullPointerRedundantCheck ; train or val is set (checked at the top)
  job.train = split_of(file, in, train ? *train : *val);
  if (train && val) job.val = split_of(file, in, *val);
  if (!train) job.train_name = "val";
  const data::SplitInfo& info = (train ? *train : *val).info();
  job.num_classes = info.classification ? info.num_classes : 0;
  write_packed(w, job);
}

}  // namespace hpc::data_tools
