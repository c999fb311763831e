// Byte-level BPE: the model of GPT-2's, Llama 3's and Qwen's tokenizer.json.
//
// Encoding one document, as Hugging Face tokenizers does it:
//   1. non-special added tokens are cut out of the text (leftmost, longest);
//      special ones are not (tokenizer.h says why);
//   2. the pre-tokenizer splits the rest into pieces: a sequence of stages,
//      each a regex Split (Isolated: matches and the gaps between them are
//      pieces; Removed: the matches are dropped) or the ByteLevel stage (its
//      own GPT-2 regex when use_regex; add_prefix_space); bytes that are not
//      UTF-8 never reach the regexes: each is a piece of its own, its byte's
//      token (so any input survives decode exactly);
//   3. each piece's bytes start as one symbol per byte (the vocabulary's 256
//      byte-level characters) and the adjacent pair of lowest merge rank is
//      merged, leftmost first, until none is in the merge list. A min-heap of
//      candidate pairs over a linked list of symbols does this in
//      O(n log n): a piece can be kilobytes (a run of spaces, a base64 blob).
//      With ignore_merges (Llama 3) a piece that is itself in the vocabulary
//      is that one token, without merging: several hundred of Llama 3's
//      tokens can only come out that way.
// Pieces repeat (" the", "\n"), so each thread keeps a cache of the ids of
// recent short pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/pretoken_regex.h"
#include "text/tokenizer.h"

namespace hpc::text {

// What tokenizer_json.cpp reads out of a tokenizer.json; strings are as in the file
// (vocabulary and merges in the byte-level alphabet, added tokens' content as text).
struct BpeSpec {
  struct Stage {
    enum Kind { Split, ByteLevel } kind = Split;
    std::string pattern;            // Split: the regex; ByteLevel: GPT-2's when use_regex, else ""
    bool remove_matches = false;    // Split behavior "Removed" (else "Isolated")
    bool add_prefix_space = false;  // ByteLevel
  };
  struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
  };
  std::string origin;  // the file, for messages
  std::vector<Stage> stages;
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added;
  bool ignore_merges = false;
  std::optional<int32_t> bos, eos;
};

// GPT-2's pre-tokenizer regex: the ByteLevel stage's when use_regex is true.
extern const char* const GPT2_PATTERN;

// Checks the spec (every merge's parts and result in the vocabulary, the 256 byte symbols present, ids
// unique) and builds the tokenizer; UserError naming spec.origin otherwise.
std::unique_ptr<Tokenizer> make_byte_level_bpe(const BpeSpec& spec);

// Reads a tokenizer.json (tokenizer_json.cpp); UserError naming `origin` and the key that is wrong.
BpeSpec parse_tokenizer_json(const std::string& bytes, const std::string& origin);

// The byte-level alphabet of GPT-2 (bytes_to_unicode): the code point byte b is written as.
uint32_t byte_to_unicode(uint8_t b);

}  // namespace hpc::text
