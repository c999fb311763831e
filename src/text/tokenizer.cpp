// Tokenizer::load / from_bytes (the kind is told by the content) and tokenizer_of_dataset.
#include "text/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/byte_level_bpe.h"
#include "text/sentencepiece.h"
#include "text/stored.h"

namespace hpc::text {

std::unique_ptr<Tokenizer> Tokenizer::from_bytes(const std::string& bytes, const std::string& origin) {
  // A tokenizer.json is a JSON object; a .model is a protocol buffer, whose first byte is a field tag
  // (0x0A for its first piece), never '{' or whitespace.
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{')
    return make_byte_level_bpe(parse_tokenizer_json(bytes, origin));
  if (bytes.empty()) throw UserError(origin + ": empty file (not a tokenizer.json or SentencePiece .model)");
  return make_sentencepiece(bytes, origin);
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw UserError(path + ": read error");
  return from_bytes(bytes.str(), path);
}

std::unique_ptr<Tokenizer> tokenizer_of_dataset(const std::string& h5_path) {
  std::optional<StoredTokenizer> st = read_stored_tokenizer(h5_path);
  if (!st) return nullptr;
  return Tokenizer::from_bytes(st->bytes, "data file '" + h5_path + "': " + STORED_TOKENIZER +
                                              (st->file.empty() ? "" : " (" + st->file + ")"));
}

}  // namespace hpc::text
