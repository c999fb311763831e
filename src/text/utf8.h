// UTF-8 helpers the tokenizers share: validity (RFC 3629: no overlong forms,
// no surrogates, nothing above U+10FFFF, the rules PCRE2, SentencePiece and
// Rust's str all apply) and the encoding of one code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hpc::text {

// The length of the UTF-8 sequence that starts s[at], or 0 when s[at...] does not start one
// (a stray continuation byte, an overlong form, a surrogate, a truncated sequence).
size_t utf8_sequence_length(std::string_view s, size_t at);

// The length of the longest valid UTF-8 prefix of s[at...].
size_t valid_utf8_run(std::string_view s, size_t at);

// The offset of the first byte of s that is not part of valid UTF-8, or npos.
inline size_t first_invalid_utf8(std::string_view s) {
  const size_t run = valid_utf8_run(s, 0);
  return run == s.size() ? std::string_view::npos : run;
}

// Appends the UTF-8 encoding of code point `cp` (< 0x110000, not a surrogate).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace hpc::text
