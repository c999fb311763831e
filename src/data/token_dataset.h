// TokenDataset: one split of a language-model data file, as training windows.
//
// Layout (docs/data.md "HDF5 layout"): /SPLIT/tokens is a 1-D uint16 (uint32 for
// vocabularies above 65,536, or int32) token stream, written contiguous by
// `hpcdata pack --from text` so it can be memory-mapped; attributes
// `vocab_size` (the tokenizer's vocabulary, e.g. 256 for bytes) and
// `tokenizer` (a name, e.g. "byte"; the tokenizer file itself, when there is
// one, is /tokenizer: text/stored.h).
//
// Sample i is the window tokens[i·T, i·T + T + 1) for context T: x = its
// first T tokens as floats (the model's input [T]), y = its last T tokens as
// int32 (the next token at every position, [T]). The inputs of two windows
// never overlap (window i's last target is window i+1's first input), so an
// epoch sees every token once as input; there are (tokens − 1) / T windows
// and the tail that does not fill one is not used. The DistributedSampler
// works on window indices, so sharding across ranks, the (seed, epoch)
// order and exact resume are the ones every other dataset has.
//
// Reads go through the same SampleSource as H5Dataset (one "row" = one
// token): memory-mapped when the dataset is contiguous and native, else
// H5Dread of the runs of consecutive tokens the windows cover.
//
// Checked at open (one UserError line naming file, dataset and index): the
// dataset exists, is 1-D uint16/uint32/int32 and holds at least one window; the
// vocabulary (attribute on this split, else on /train/tokens, else the
// largest token + 1); every token in [0, vocab) — the first 4096 windows, or
// all with full_check (data.check = full). gather() checks the tokens it
// copies too (a comparison per token), so a bad token past the quick scan is
// still an error, never an out-of-range embedding read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/h5_dataset.h"

namespace hpc::data {

class SampleSource;

// How token ids are stored: uint16 (vocabularies up to 65,536), uint32 (larger ones, Llama 3's
// 128,256), or int32 (what other writers may use).
enum class TokenType { U16, U32, I32 };
const char* token_type_name(TokenType t);  // "uint16", "uint32", "int32"
int64_t token_type_size(TokenType t);      // bytes per id

class TokenDataset : public Dataset {
 public:
  // Opens `split` of `path` cut into windows of `context` tokens (+1 for the
  // last target). Throws UserError (one line) on any problem.
  TokenDataset(const std::string& path, const std::string& split, int64_t context,
               const OpenOptions& options = {});
  ~TokenDataset() override;

  // True when `path` holds a token split (/train/tokens or /val/tokens):
  // the trainer then trains a language model on it. Throws UserError when
  // the file cannot be opened as HDF5.
  static bool is_token_file(const std::string& path);
  // True when `path` has /SPLIT/tokens.
  static bool has_tokens(const std::string& path, const std::string& split);

  const SplitInfo& info() const override { return info_; }
  const std::string& path() const override { return path_; }
  const std::string& split() const { return split_; }
  std::string describe() const override;
  bool mapped() const override;
  std::vector<std::string> unmapped() const override;
  // x: F32 or F64 [n, T] token ids; y: I32 [n, T] next-token ids.
  void gather(const int64_t* indices, int64_t n, const Tensor& x, const Tensor& y) const override;

  int64_t context() const { return context_; }
  int64_t num_tokens() const { return tokens_; }
  int64_t vocab() const { return info_.num_classes; }
  const std::string& vocab_source() const { return vocab_source_; }  // "the vocab_size attribute of …"
  const std::string& tokenizer() const { return tokenizer_; }        // "" when the file names none
  TokenType token_type() const { return token_type_; }

  // Copies tokens [first, first + n) as int64 (for tests and tools).
  std::vector<int64_t> read_tokens(int64_t first, int64_t n) const;

 private:
  // Converts `n` windows: window i's T + 1 tokens start at token indices[i]·T of
  // `rows` (the mapping), or at i·(T + 1) when `staged` (read into a buffer).
  template <typename Tok, typename X>
  void convert(const std::byte* rows, bool staged, const int64_t* indices, int64_t n, X* x, int32_t* y) const;

  std::string path_, split_, what_;  // what_: "data file 'PATH': /SPLIT/tokens"
  SplitInfo info_;
  int64_t context_ = 0, tokens_ = 0;
  TokenType token_type_ = TokenType::U16;
  std::string vocab_source_, tokenizer_;
  std::unique_ptr<SampleSource> src_;
};

}  // namespace hpc::data
