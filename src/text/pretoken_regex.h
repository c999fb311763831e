// A pre-tokenizer regex of a tokenizer.json (or tiktoken's pat_str), run by PCRE2.
//
// The patterns are written for Rust's regex / Oniguruma, where \s is Unicode
// White_Space. PCRE2 with PCRE2_UCP agrees on \p{L}, \p{N}, leftmost-first
// alternation, (?i:…) and the lookahead of \s+(?!\S), but its \s also matches
// U+180E (Mongolian vowel separator, a space before Unicode 6.3). So \s and \S
// are rewritten to PCRE2's own \p{White_Space} / \P{White_Space} before
// compiling: U+0085, U+00A0 and U+202F are whitespace, U+180E, U+200B and
// U+FEFF are not, as in tiktoken and Hugging Face tokenizers.
//
// Patterns are JIT-compiled. Matching needs a per-thread match block and JIT
// stack (thread_local, grown up to 64 MiB, so a megabyte of spaces before a
// lookahead still matches); a pattern that hits PCRE2's limits anyway is a
// UserError naming the piece's length, never a wrong split.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace hpc::text {

class PretokenRegex {
 public:
  // `pattern` in tokenizer.json's syntax; `origin` names it in errors ("FILE: pre_tokenizer …").
  PretokenRegex(const std::string& pattern, const std::string& origin);
  ~PretokenRegex();
  PretokenRegex(const PretokenRegex&) = delete;
  PretokenRegex& operator=(const PretokenRegex&) = delete;

  // The first match in text[from...] (valid UTF-8): true and [begin, end), or false when none.
  // An empty match is skipped (the search resumes one character later).
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_, origin_;
  pcre2_real_code_8* code_ = nullptr;
};

// `pattern` with \s and \S replaced by \p{White_Space} and \P{White_Space} (exposed for tests).
std::string white_space_as_unicode(const std::string& pattern);

}  // namespace hpc::text
