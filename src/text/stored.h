// The tokenizer a packed text dataset was made with, as hpcdata stores it.
//
// Layout: the dataset /tokenizer holds the tokenizer file's bytes (uint8,
// 1-D), with the string attributes `format` ("tokenizer.json" or
// "sentencepiece"), `name` (Tokenizer::name()) and `file` (the file's base
// name when packed), and the integer attributes `vocab_size`, `bos_id` and
// `eos_id` (-1: none). The token splits carry `vocab_size`, `tokenizer`
// (the name), `bos_id` and `eos_id` too, so that a reader of the tokens alone
// knows them. Reading the file's bytes back and handing them to
// Tokenizer::from_bytes gives exactly the tokenizer that packed the data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hpc::text {

constexpr const char* STORED_TOKENIZER = "/tokenizer";

struct StoredTokenizer {
  std::string bytes;   // the tokenizer file
  std::string format;  // "tokenizer.json" | "sentencepiece"
  std::string name, file;
  int64_t vocab_size = 0;
  int64_t bos_id = -1, eos_id = -1;  // -1: none
};

// The tokenizer stored in `h5_path`, or nullopt when it has none (byte-level or tokens-bin data).
// UserError when the file cannot be read as HDF5 or /tokenizer is not laid out as above.
std::optional<StoredTokenizer> read_stored_tokenizer(const std::string& h5_path);

}  // namespace hpc::text
