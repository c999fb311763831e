// TokenDataset: open-time checks of a token split, and window gathering.
//
// Like H5Dataset, the constructor is a list of checks in the order a user
// would fix them (file, dataset, type and shape, length, vocabulary, token
// values), each one UserError line "data file 'PATH': /SPLIT/tokens …".
#include "data/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "backend/dispatch.h"
#include "core/error.h"
#include "core/fault.h"
#include "data/h5_handle.h"
#include "data/sample_source.h"

namespace hpc::data {

namespace {

// The quick check scans the tokens of this many windows (as H5Dataset scans
// 4096 samples for NaN/Inf): a file of garbage fails at open, on any size.
constexpr int64_t QUICK_CHECK_WINDOWS = 4096;

bool link_exists(hid_t file, const std::string& name) {
  // H5Lexists fails (rather than answering false) when a parent is missing, so walk down.
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = name.find('/', pos + 1);
    if (H5Lexists(file, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

// A positive integer attribute, or nullopt when absent.
std::optional<int64_t> vocab_attr(hid_t dset, const std::string& what) {
  const std::string where = what + ": attribute 'vocab_size'";
  if (h5_check(H5Aexists(dset, "vocab_size"), where + " cannot be read") == 0) return std::nullopt;
  H5Handle a =
      H5Handle::attr(h5_check(H5Aopen(dset, "vocab_size", H5P_DEFAULT), where + " cannot be opened"));
  H5Handle t = H5Handle::type(h5_check(H5Aget_type(a.id()), where + " cannot be read"));
  H5Handle s = H5Handle::space(h5_check(H5Aget_space(a.id()), where + " cannot be read"));
  const H5T_class_t cls = H5Tget_class(t.id());
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || H5Sget_simple_extent_npoints(s.id()) != 1)
    throw UserError(where + " must be a single number");
  double v = 0;
  h5_check(H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v), where + " cannot be read");
  if (!(v >= 1 && v <= 2147483647.0 && v == std::floor(v)))
    throw UserError(where + " must be a positive integer, got " + std::to_string(v));
  return static_cast<int64_t>(v);
}

// A string attribute, or "" when absent or not a string.
std::string string_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return "";
  H5Handle a = H5Handle::attr(H5Aopen(obj, name, H5P_DEFAULT));
  H5Handle t = H5Handle::type(H5Aget_type(a.id()));
  if (!t.valid() || H5Tget_class(t.id()) != H5T_STRING || H5Tis_variable_str(t.id()) > 0) return "";
  std::string v(H5Tget_size(t.id()), '\0');
  if (H5Aread(a.id(), t.id(), v.data()) < 0) return "";
  return v.substr(0, v.find('\0'));
}

H5Handle open_tokens(hid_t file, const std::string& name, const std::string& file_what) {
  if (!link_exists(file, name)) throw UserError(file_what + ": " + name + " is missing");
  H5Handle dapl = h5_dataset_access(file_what + ": " + name);
  return H5Handle::dataset(
      h5_check(H5Dopen2(file, name.c_str(), dapl.id()), file_what + ": " + name + " cannot be opened"));
}

// The stored token type, or nullopt for anything but uint16, uint32 and int32.
std::optional<TokenType> stored_token_type(hid_t dset) {
  H5Handle t = H5Handle::type(H5Dget_type(dset));
  if (!t.valid() || H5Tget_class(t.id()) != H5T_INTEGER) return std::nullopt;
  const size_t size = H5Tget_size(t.id());
  const bool is_signed = H5Tget_sign(t.id()) == H5T_SGN_2;
  if (size == 2 && !is_signed) return TokenType::U16;
  if (size == 4) return is_signed ? TokenType::I32 : TokenType::U32;
  return std::nullopt;
}

int64_t load_token(const std::byte* p, TokenType t) {
  if (t == TokenType::U16) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  if (t == TokenType::U32) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Calls fn(token, index) for tokens [0, n) in bounded blocks.
template <typename Fn>
void scan_tokens(const SampleSource& src, TokenType t, int64_t n, Fn&& fn) {
  scan_rows(src, 0, n, [&](const std::byte* rows, int64_t first, int64_t count) {
    for (int64_t i = 0; i < count; ++i) fn(load_token(rows + i * src.row_bytes(), t), first + i);
  });
}

}  // namespace

const char* token_type_name(TokenType t) {
  return t == TokenType::U16 ? "uint16" : t == TokenType::U32 ? "uint32" : "int32";
}
int64_t token_type_size(TokenType t) { return t == TokenType::U16 ? 2 : 4; }

TokenDataset::TokenDataset(const std::string& path, const std::string& split, int64_t context,
                           const OpenOptions& options)
    : path_(path), split_(split), context_(context) {
  HPC_ASSERT(context >= 1, "TokenDataset: context must be positive");
  auto lock = h5_lock();
  H5QuietErrors quiet;
  const std::string file_what = "data file '" + path + "'";
  const std::string name = "/" + split + "/tokens";
  what_ = file_what + ": " + name;

  H5Handle file = h5_open_read_only(path);
  H5Handle dset = open_tokens(file.id(), name, file_what);
  const std::optional<TokenType> type = stored_token_type(dset.id());
  if (!type) {
    H5Handle t = H5Handle::type(H5Dget_type(dset.id()));
    throw UserError(what_ + " is " + (t.valid() ? h5_type_name(t.id()) : std::string("unreadable")) +
                    "; tokens must be uint16, uint32 or int32");
  }
  H5Handle space = H5Handle::space(h5_check(H5Dget_space(dset.id()), what_ + ": cannot read its shape"));
  const int rank = h5_check(H5Sget_simple_extent_ndims(space.id()), what_ + ": cannot read its shape");
  hsize_t dims[2] = {0, 0};
  if (rank != 1) throw UserError(what_ + " has " + std::to_string(rank) + " dimensions; tokens must be 1-D");
  h5_check(H5Sget_simple_extent_dims(space.id(), dims, nullptr), what_ + ": cannot read its shape");
  tokens_ = static_cast<int64_t>(dims[0]);
  if (tokens_ < context + 1)
    throw UserError(what_ + " holds " + std::to_string(tokens_) + " tokens, fewer than one window of " +
                    std::to_string(context + 1) + " (model.context " + std::to_string(context) +
                    " + 1): use more text or a smaller --model.context");

  token_type_ = *type;
  const hid_t native = *type == TokenType::U16   ? H5T_NATIVE_UINT16
                       : *type == TokenType::U32 ? H5T_NATIVE_UINT32
                                                 : H5T_NATIVE_INT32;
  src_ = open_source(file.id(),
                     SourceRequest{name, native, tokens_, token_type_size(*type), options.allow_mmap, what_});

  // Vocabulary: this split's attribute, else /train/tokens' (train and val must agree), else max + 1.
  std::optional<int64_t> vocab = vocab_attr(dset.id(), what_);
  vocab_source_ = "the vocab_size attribute of " + name;
  if (split != "train" && link_exists(file.id(), "/train/tokens")) {
    H5Handle train = open_tokens(file.id(), "/train/tokens", file_what);
    std::optional<int64_t> train_vocab = vocab_attr(train.id(), file_what + ": /train/tokens");
    if (vocab && train_vocab && *vocab != *train_vocab)
      throw UserError(file_what + ": vocab_size is " + std::to_string(*vocab) + " on " + name + " but " +
                      std::to_string(*train_vocab) + " on /train/tokens");
    if (!vocab && train_vocab) {
      vocab = train_vocab;
      vocab_source_ = "the vocab_size attribute of /train/tokens";
    }
  }
  tokenizer_ = string_attr(dset.id(), "tokenizer");

  const int64_t scan =
      vocab && !options.full_check ? std::min(tokens_, QUICK_CHECK_WINDOWS * context + 1) : tokens_;
  int64_t max_token = -1;
  scan_tokens(*src_, *type, scan, [&](int64_t v, int64_t at) {
    if (v < 0 || (vocab && v >= *vocab))
      throw UserError(what_ + ": token " + std::to_string(v) + " at index " + std::to_string(at) +
                      " is outside [0, " + (vocab ? std::to_string(*vocab) : std::string("...")) + ") (" +
                      vocab_source_ + ")");
    max_token = std::max(max_token, v);
  });
  if (!vocab) {
    vocab = max_token + 1;
    vocab_source_ = "largest token of " + name + " + 1";
  }

  info_.size = (tokens_ - 1) / context;
  info_.sample_shape = Shape{context};
  info_.x_dtype =
      *type == TokenType::U16 ? DType::U16 : DType::I32;  // uint32 ids are below 2^31 (the vocabulary)
  info_.classification = true;
  info_.num_classes = *vocab;
  info_.target_shape = Shape{context};
}

TokenDataset::~TokenDataset() = default;

std::string TokenDataset::describe() const {
  std::string s = std::to_string(tokens_) + " " + split_ + " tokens (" + token_type_name(token_type_) +
                  ") = " + std::to_string(info_.size) + " windows of " + std::to_string(context_) +
                  " + 1, vocabulary " + std::to_string(info_.num_classes);
  if (!tokenizer_.empty()) s += " (" + tokenizer_ + " tokenizer)";
  return s;
}

bool TokenDataset::is_token_file(const std::string& path) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle file = h5_open_read_only(path);
  return link_exists(file.id(), "/train/tokens") || link_exists(file.id(), "/val/tokens");
}

bool TokenDataset::has_tokens(const std::string& path, const std::string& split) {
  auto lock = h5_lock();
  H5QuietErrors quiet;
  H5Handle file = h5_open_read_only(path);
  return link_exists(file.id(), "/" + split + "/tokens");
}

bool TokenDataset::mapped() const { return src_->data() != nullptr; }

std::vector<std::string> TokenDataset::unmapped() const {
  if (mapped()) return {};
  return {"/" + split_ + "/tokens (" + src_->why_not_mapped() + ")"};
}

template <typename Tok, typename X>
void TokenDataset::convert(const std::byte* rows, bool staged, const int64_t* indices, int64_t n, X* x,
                           int32_t* y) const {
  const int64_t t = context_, vocab = info_.num_classes;
  for (int64_t i = 0; i < n; ++i) {
    // Mapped: window indices[i] starts at token indices[i]·T; staged: window i at i·(T + 1).
    const int64_t first = staged ? i * (t + 1) : indices[i] * t;
    const std::byte* p = rows + first * static_cast<int64_t>(sizeof(Tok));
    for (int64_t j = 0; j <= t; ++j) {
      Tok v;
      std::memcpy(&v, p + j * static_cast<int64_t>(sizeof(Tok)), sizeof v);
      if (static_cast<int64_t>(v) < 0 || static_cast<int64_t>(v) >= vocab) {
        throw UserError(what_ + ": token " + std::to_string(static_cast<int64_t>(v)) + " at index " +
                        std::to_string(indices[i] * t + j) + " is outside [0, " + std::to_string(vocab) +
                        ") (" + vocab_source_ + ")");
      }
      if (j < t) x[i * t + j] = static_cast<X>(v);
      if (j > 0) y[i * t + j - 1] = static_cast<int32_t>(v);
    }
  }
}

void TokenDataset::gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const {
  const int64_t t = context_;
  HPC_ASSERT(x.device() == Device::CPU && y.device() == Device::CPU,
             "TokenDataset::gather into device tensors");
  HPC_ASSERT(x.count() == n * t && y.count() == n * t && y.dtype() == DType::I32,
             "gather: x is " + x.shape().str() + ", y is " + y.shape().str() + " for " + std::to_string(n) +
                 " windows of " + std::to_string(t));
  for (int64_t i = 0; i < n; ++i)
    HPC_ASSERT(
        indices[i] >= 0 && indices[i] < info_.size,
        "gather: window " + std::to_string(indices[i]) + " outside [0, " + std::to_string(info_.size) + ")");

  // Mapped: straight from the mapping. Else one read of all windows' tokens
  // (ReadSource merges them into runs of consecutive tokens).
  std::vector<std::byte> staged;
  const std::byte* rows = src_->data();
  // Test-only (HPCTRAIN_FAULT eio@data_read), as in H5Dataset::gather: the mapped path's stand-in for a
  // failed read (the H5Dread path has its hook in ReadSource).
  if (rows)
    if (const int err = fault_at(FaultPoint::DataRead)) {
      const int64_t first = *std::min_element(indices, indices + n) * t;
      const int64_t last = *std::max_element(indices, indices + n) * t + t;
      throw_read_error(what_,
                       std::to_string(n) + " windows (tokens " + std::to_string(first) + " to " +
                           std::to_string(last) + ")",
                       err);
    }
  if (!rows) {
    std::vector<int64_t> positions;
    positions.reserve(static_cast<size_t>(n * (t + 1)));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= t; ++j) positions.push_back(indices[i] * t + j);
    staged.resize(positions.size() * static_cast<size_t>(src_->row_bytes()));
    src_->read_rows(positions.data(), static_cast<int64_t>(positions.size()), staged.data());
    rows = staged.data();
  }
  int32_t* yd = y.data<int32_t>();
  backend::dispatch_float(x.dtype(), "TokenDataset::gather x", [&]<typename X>() {
    if (token_type_ == TokenType::U16)
      convert<uint16_t, X>(rows, !staged.empty(), indices, n, x.data<X>(), yd);
    else if (token_type_ == TokenType::U32)
      convert<uint32_t, X>(rows, !staged.empty(), indices, n, x.data<X>(), yd);
    else
      convert<int32_t, X>(rows, !staged.empty(), indices, n, x.data<X>(), yd);
  });
}

std::vector<int64_t> TokenDataset::read_tokens(int64_t first, int64_t n) const {
  HPC_ASSERT(first >= 0 && n >= 0 && first + n <= tokens_, "read_tokens range");
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  scan_rows(*src_, first, n, [&](const std::byte* rows, int64_t, int64_t count) {
    for (int64_t i = 0; i < count; ++i) out.push_back(load_token(rows + i * src_->row_bytes(), token_type_));
  });
  return out;
}

}  // namespace hpc::data
