// PretokenRegex: PCRE2 compile (UTF, UCP, JIT) and a thread-local match block.
#include "text/pretoken_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "text/utf8.h"

namespace hpc::text {

namespace {

constexpr size_t JIT_STACK_START = 32 * 1024, JIT_STACK_MAX = 64 * 1024 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// One match block (a single pair: only the whole match is used) and JIT stack per thread, shared by
// every pattern: created on a thread's first match, freed when the thread ends.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(JIT_STACK_START, JIT_STACK_MAX, nullptr);
  ThreadMatchState() {
    if (!data || !context || !stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string white_space_as_unicode(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    // A backslash always takes the next character with it, so "\\s" (a literal backslash, then s) stays.
    const char next = pattern[++i];
    if (next == 's')
      out += "\\p{White_Space}";
    else if (next == 'S')
      out += "\\P{White_Space}";
    else
      out += {'\\', next};
  }
  return out;
}

PretokenRegex::PretokenRegex(const std::string& pattern, const std::string& origin)
    : pattern_(pattern), origin_(origin) {
  const std::string translated = white_space_as_unicode(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code_)
    throw UserError(origin + ": the regex '" + pattern + "' does not compile (" + pcre2_message(error) +
                    " at offset " + std::to_string(offset) + " of its PCRE2 form)");
  // Without JIT (a platform PCRE2 has none for) the interpreter gives the same matches, only slower.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

PretokenRegex::~PretokenRegex() { pcre2_code_free(code_); }

bool PretokenRegex::find(std::string_view text, size_t from, size_t& begin, size_t& end) const {
  ThreadMatchState& state = thread_match_state();
  while (from < text.size()) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                               PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0)
      throw UserError(origin_ + ": the regex '" + pattern_ + "' failed on a piece of " +
                      std::to_string(text.size() - from) + " bytes (" + pcre2_message(rc) + ")");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    begin = ovector[0];
    end = ovector[1];
    if (end > begin) return true;
    if (begin >= text.size()) return false;
    from = begin + utf8_sequence_length(text, begin);  // an empty match: try again one character on
  }
  return false;
}

}  // namespace hpc::text
