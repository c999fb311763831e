// Tokenizers of real vocabularies: text ↔ token ids.
//
// Two kinds, chosen by the file's content (not its name):
//   - a Hugging Face tokenizer.json of byte-level BPE (GPT-2, Llama 3, Qwen):
//     the pre-tokenizer's regexes (PCRE2 with Unicode properties), the
//     merges, ignore_merges, added tokens (byte_level_bpe.h);
//   - a SentencePiece .model, run by libsentencepiece itself (sentencepiece.h).
// `hpcdata pack --from text --tokenizer FILE` encodes with it and stores the
// file's bytes in the packed dataset (stored.h), so that `hpctrain sample` and
// `eval` decode with exactly the tokenizer the data was made with.
//
// encode() adds no special tokens (no bos/eos: the caller decides where a
// document starts and ends) and treats a special token's text that occurs in
// the input ("<|endoftext|>") as ordinary text, as tiktoken's encode_ordinary
// does: a document that quotes the marker must not end there. Bytes that are
// not UTF-8 are kept exactly where the tokenizer can represent them (byte-level
// BPE always, SentencePiece with byte fallback) and are a UserError otherwise.
// Every method is const and safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpc::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // A tokenizer.json (byte-level BPE) or a SentencePiece .model, chosen by content; UserError (exit 2)
  // naming the file and what is wrong.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // The same from the bytes of such a file (what hpcdata stores in the HDF5 file); `origin` names it in
  // errors.
  static std::unique_ptr<Tokenizer> from_bytes(const std::string& bytes, const std::string& origin);

  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // no special tokens added
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::string name() const = 0;  // e.g. "byte-level BPE (tokenizer.json, 128256 tokens)"

  // "tokenizer.json" or "sentencepiece": the format of the file's bytes (stored beside them).
  virtual std::string format() const = 0;
  // True when encode() keeps any byte sequence exactly (invalid UTF-8 included);
  // false when such text is a UserError (SentencePiece without byte fallback).
  virtual bool accepts_any_bytes() const = 0;
  // The text of one token as decode() would give it alone (special tokens included).
  virtual std::string token_text(int32_t id) const = 0;
};

// The tokenizer stored in a packed text dataset (hpcdata), if any.
std::unique_ptr<Tokenizer> tokenizer_of_dataset(const std::string& h5_path);

}  // namespace hpc::text
