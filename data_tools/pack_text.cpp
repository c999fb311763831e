// hpcdata pack --from text FILE...: text → a byte-level token stream.
//
// The tokenizer is the identity on bytes: token = byte value, vocabulary
// 256. It is lossless for any input (UTF-8, Latin-1, binary) and needs no
// vocabulary file, which is what a test model and a first run want; with
// --tokenizer FILE a real vocabulary encodes the text instead
// (pack_text_tokenizer.cpp). Files are concatenated in the order given, byte
// for byte.
//
// The tokens are stored as uint16 (room for vocabularies up to 65536) in
// /train/tokens and /val/tokens, contiguous and 4 KiB-aligned like every
// hpcdata output, so each rank memory-maps them. /val is the LAST fraction of
// the stream (not random windows: neighbouring windows share text, and a
// random split would leak training text into validation), at least one
// window of --context + 1 tokens; or the --val files. Both carry the
// attributes vocab_size = 256 and tokenizer = "byte".
//
// Input is streamed in blocks, so a corpus larger than memory packs too.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "commands.h"
#include "core/error.h"

namespace hpc::data_tools {

namespace {

constexpr int64_t BYTE_VOCAB = 256;
constexpr double DEFAULT_VAL_FRACTION = 0.05;
constexpr size_t BLOCK = size_t(1) << 20;  // bytes read and written per block

struct TextFile {
  std::string path;
  int64_t bytes = 0;
};

// Sizes of the inputs; a missing, unreadable or non-regular file is one line.
std::vector<TextFile> stat_inputs(const std::vector<std::string>& paths) {
  std::vector<TextFile> files;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) throw UserError(p + ": cannot open (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) throw UserError(p + ": is a directory (give the text files in it)");
    if (!S_ISREG(st.st_mode))
      throw UserError(p + ": not a regular file (pipes and devices cannot be packed)");
    files.push_back({p, static_cast<int64_t>(st.st_size)});
  }
  return files;
}

int64_t total_bytes(const std::vector<TextFile>& files) {
  int64_t n = 0;
  for (const TextFile& f : files) n += f.bytes;
  return n;
}

// Streams the bytes of `files` as tokens: position k of the concatenation
// goes to sinks[k < split ? 0 : 1] at row k (minus split for the second).
void stream_tokens(DatasetWriter& w, const std::vector<TextFile>& files, int64_t split,
                   const std::string sinks[2]) {
  std::vector<unsigned char> bytes(BLOCK);
  std::vector<uint16_t> tokens(BLOCK);
  int64_t at = 0;
  for (const TextFile& f : files) {
    std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(f.path.c_str(), "rb"), std::fclose);
    if (!in) throw UserError(f.path + ": cannot open (" + std::strerror(errno) + ")");
    int64_t left = f.bytes;
    while (left > 0) {
      const size_t want = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(BLOCK)));
      const size_t got = std::fread(bytes.data(), 1, want, in.get());
      if (got != want)
        throw UserError(f.path + ": " +
                        (std::ferror(in.get())
                             ? "read error (" + std::string(std::strerror(errno)) + ")"
                             : std::string("shorter than when packing started (changed while "
                                           "being read?)")));
      std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(got), tokens.begin());
      // A block may straddle the train/val boundary: write the two parts to their sinks.
      int64_t done = 0;
      while (done < static_cast<int64_t>(got)) {
        const int64_t pos = at + done;
        const int s = pos < split ? 0 : 1;
        const int64_t end = s == 0 ? std::min<int64_t>(split, at + static_cast<int64_t>(got)) : at + got;
        w.write_rows(sinks[s], s == 0 ? pos : pos - split, end - pos, tokens.data() + done);
        done = end - at;
      }
      at += static_cast<int64_t>(got);
      left -= static_cast<int64_t>(got);
    }
  }
}

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

void pack_text(DatasetWriter& w, const PackOptions& opt) {
  if (!opt.tokenizer.empty()) return pack_text_tokenized(w, opt);
  const int64_t window = opt.context + 1;
  const std::vector<TextFile> train_files = stat_inputs(opt.inputs);
  const std::vector<TextFile> val_files = stat_inputs(opt.val_inputs);
  const int64_t n = total_bytes(train_files), n_extra_val = total_bytes(val_files);
  if (n == 0)
    throw UserError("pack --from text: no text (" + opt.inputs.front() +
                    (opt.inputs.size() > 1 ? ", …" : "") + " empty)");
  if (!val_files.empty() && n_extra_val < window)
    throw UserError("pack --from text: the --val text has " + plural(n_extra_val, "byte") +
                    ", fewer than one window of " + std::to_string(window) + " (--context " +
                    std::to_string(opt.context) + " + 1)");

  // /val: the --val files, or the last fraction of the stream (at least one window), or nothing.
  const double fraction = val_files.empty() ? opt.val_fraction.value_or(DEFAULT_VAL_FRACTION) : 0.0;
  int64_t n_val = 0;
  if (fraction > 0) n_val = std::max<int64_t>(window, std::llround(fraction * double(n)));
  const int64_t n_train = n - n_val;
  if (n_train < window)
    throw UserError("pack --from text: " + plural(n, "byte") + " of text is too short for " +
                    (n_val > 0 ? "a training and a validation window" : "one training window") + " of " +
                    std::to_string(window) + " tokens (--context " + std::to_string(opt.context) + " + 1)" +
                    (n_val > 0 ? "; --val-fraction 0 keeps all of it for training" : ""));

  const std::string train = "/train/tokens", val = "/val/tokens";
  w.create(train, DType::U16, Shape{n_train});
  if (n_val + n_extra_val > 0) w.create(val, DType::U16, Shape{n_val + n_extra_val});
  const std::string sinks[2] = {train, val};
  stream_tokens(w, train_files, n_train, sinks);
  if (!val_files.empty()) {
    const std::string only_val[2] = {val, val};
    stream_tokens(w, val_files, 0, only_val);
  }
  for (const std::string& name : {train, val}) {
    if (name == val && n_val + n_extra_val == 0) continue;
    w.set_attr(name, "vocab_size", BYTE_VOCAB);
    w.set_attr(name, "tokenizer", std::string("byte"));
  }
  w.commit();

  std::printf("wrote %s: train %s", w.path().c_str(), plural(n_train, "token").c_str());
  if (n_val + n_extra_val > 0) std::printf(", val %s", plural(n_val + n_extra_val, "token").c_str());
  std::printf(" (uint16, byte-level tokenizer, vocabulary %lld) from %s\n",
              static_cast<long long>(BYTE_VOCAB),
              plural(static_cast<int64_t>(train_files.size() + val_files.size()), "file").c_str());
}

}  // namespace hpc::data_tools
