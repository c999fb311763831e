// hpcdata pack --from tokens-bin FILE... : token ids another tokenizer made
// (GPT-2 BPE via tiktoken, …) into /train/tokens and /val/tokens.
//
// Two file layouts, told apart by the first four bytes (--layout forces one):
//   nanoGPT (data/*/prepare.py): raw little-endian uint16 ids, no header;
//   llm.c (dev/data/*.py, fineweb shards): a header of 256 int32 —
//     [0] magic 20240520, [1] version 1 (uint16 ids), [2] token count —
//     then exactly `count` uint16 ids (a shorter or longer body is refused).
// Every id is checked against --vocab (default 50257, GPT-2's), stored as
// uint16 with vocab_size and tokenizer (--tokenizer, default gpt2)
// attributes; /val is the --val files, else the last --val-fraction of the
// stream (default 0.05; neighbouring windows share text, so not random
// windows), each split at least one window of --context + 1 tokens. Files
// are streamed in blocks; on any error nothing is left behind.
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

constexpr int32_t LLMC_MAGIC = 20240520;
constexpr int64_t LLMC_HEADER_BYTES = 256 * 4;
constexpr double DEFAULT_VAL_FRACTION = 0.05;
constexpr size_t BLOCK = size_t(1) << 19;  // tokens per block

struct TokenFile {
  std::string path;
  int64_t offset = 0;  // bytes before the first id
  int64_t tokens = 0;
  const char* layout = "";
};

TokenFile inspect(const std::string& path, const std::string& layout) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw UserError(path + ": not a regular file");
  const int64_t size = static_cast<int64_t>(st.st_size);
  int32_t head[3] = {0, 0, 0};
  if (size >= 12) {
    std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!in || std::fread(head, 4, 3, in.get()) != 3) throw UserError(path + ": cannot read its first bytes");
  }
  const bool llmc = layout == "llmc" || (layout == "auto" && head[0] == LLMC_MAGIC);
  if (!llmc) {
    if (size % 2 != 0)
      throw UserError(path + ": " + std::to_string(size) +
                      " bytes is not a whole number of uint16 ids (nanoGPT's raw layout; truncated?)");
    return {path, 0, size / 2, "nanoGPT raw uint16"};
  }
  if (size < LLMC_HEADER_BYTES) throw UserError(path + ": shorter than llm.c's 1024-byte header (truncated)");
  if (head[0] != LLMC_MAGIC)
    throw UserError(path + ": wrong magic " + std::to_string(head[0]) + " (llm.c token shards start with " +
                    std::to_string(LLMC_MAGIC) + ")");
  if (head[1] != 1)
    throw UserError(path + ": llm.c header version " + std::to_string(head[1]) +
                    (head[1] == 2 ? " (uint32 ids, LLaMA 3) is not supported; version 1 (uint16, GPT-2) is"
                                  : " is unknown (version 1: uint16 ids)"));
  const int64_t body = (size - LLMC_HEADER_BYTES) / 2;
  if (head[2] < 0 || body != head[2] || (size - LLMC_HEADER_BYTES) % 2 != 0)
    throw UserError(path + ": the header counts " + std::to_string(head[2]) + " tokens but the body holds " +
                    std::to_string(size - LLMC_HEADER_BYTES) + " bytes (" +
                    (body < head[2] ? "truncated" : "trailing data") + ")");
  return {path, LLMC_HEADER_BYTES, head[2], "llm.c shard"};
}

// Tokens [k, k + n) of the files' concatenation, each checked against vocab, to sinks[k < split ? 0 : 1].
void stream(DatasetWriter& w, const std::vector<TokenFile>& files, int64_t split, const std::string sinks[2],
            int64_t vocab) {
  std::vector<uint16_t> block(BLOCK);
  int64_t at = 0;
  for (const TokenFile& f : files) {
    std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(f.path.c_str(), "rb"), std::fclose);
    if (!in || std::fseek(in.get(), f.offset, SEEK_SET) != 0) throw UserError(f.path + ": cannot open");
    for (int64_t done = 0; done < f.tokens;) {
      const size_t want =
          static_cast<size_t>(std::min<int64_t>(f.tokens - done, static_cast<int64_t>(BLOCK)));
      if (std::fread(block.data(), 2, want, in.get()) != want)
        throw UserError(f.path + ": shorter than when packing started (changed while being read?)");
      for (size_t i = 0; i < want; ++i)
        if (block[i] >= vocab)
          throw UserError(f.path + ": token " + std::to_string(block[i]) + " at position " +
                          std::to_string(done + static_cast<int64_t>(i)) + " is >= the vocabulary " +
                          std::to_string(vocab) + " (--vocab)");
      int64_t k = 0;
      while (k < static_cast<int64_t>(want)) {
        const int64_t pos = at + k;
        const int s = pos < split ? 0 : 1;
        const int64_t end = s == 0 ? std::min<int64_t>(split, at + static_cast<int64_t>(want))
                                   : at + static_cast<int64_t>(want);
        w.write_rows(sinks[s], s == 0 ? pos : pos - split, end - pos, block.data() + k);
        k = end - at;
      }
      at += static_cast<int64_t>(want);
      done += static_cast<int64_t>(want);
    }
  }
}

int64_t count(const std::vector<TokenFile>& files) {
  int64_t n = 0;
  for (const TokenFile& f : files) n += f.tokens;
  return n;
}

}  // namespace

void pack_tokens_bin(DatasetWriter& w, const PackOptions& opt) {
  if (opt.layout != "auto" && opt.layout != "raw" && opt.layout != "llmc")
    throw UserError("--layout expects auto, raw or llmc, got '" + opt.layout + "'");
  if (opt.vocab < 1 || opt.vocab > 65536)
    throw UserError("--vocab must be in [1, 65536] (ids are stored as uint16), got " +
                    std::to_string(opt.vocab));
  const std::string tokenizer = opt.tokenizer.empty() ? "gpt2" : opt.tokenizer;
  std::vector<TokenFile> train, val;
  for (const std::string& p : opt.inputs) train.push_back(inspect(p, opt.layout));
  for (const std::string& p : opt.val_inputs) val.push_back(inspect(p, opt.layout));
  const int64_t window = opt.context + 1, n = count(train), n_extra = count(val);
  const double fraction = val.empty() ? opt.val_fraction.value_or(DEFAULT_VAL_FRACTION) : 0.0;
  const int64_t n_val = fraction > 0 ? std::max<int64_t>(window, std::llround(fraction * double(n))) : 0;
  const int64_t n_train = n - n_val;
  if (n_train < window || (!val.empty() && n_extra < window))
    throw UserError("pack --from tokens-bin: " + std::to_string(n) + " training and " +
                    std::to_string(n_val + n_extra) + " validation tokens: each split needs one window of " +
                    std::to_string(window) + " (--context " + std::to_string(opt.context) + " + 1)");
  const std::string tr = "/train/tokens", va = "/val/tokens";
  w.create(tr, DType::U16, Shape{n_train});
  if (n_val + n_extra > 0) w.create(va, DType::U16, Shape{n_val + n_extra});
  const std::string sinks[2] = {tr, va};
  stream(w, train, n_train, sinks, opt.vocab);
  if (!val.empty()) {
    const std::string only_val[2] = {va, va};
    stream(w, val, 0, only_val, opt.vocab);
  }
  for (const std::string& name : {tr, va}) {
    if (name == va && n_val + n_extra == 0) continue;
    w.set_attr(name, "vocab_size", opt.vocab);
    w.set_attr(name, "tokenizer", tokenizer);
  }
  w.commit();
  std::printf("wrote %s: train %lld tokens", w.path().c_str(), static_cast<long long>(n_train));
  if (n_val + n_extra > 0)
    std::printf(", val %lld tokens", static_cast<long long>(n_val) + static_cast<long long>(n_extra));
  std::printf(" (uint16, tokenizer %s, vocabulary %lld) from %zu file(s): %s\n", tokenizer.c_str(),
              static_cast<long long>(opt.vocab), train.size() + val.size(), train.front().layout);
}

}  // namespace hpc::data_tools
