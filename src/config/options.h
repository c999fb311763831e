// The option table: the one list of hpctrain's options (internal to src/config).
//
// Every consumer derives from this table instead of keeping its own list:
// the Boost.Program_options description, --help, to_ini(), the environment
// name mapping (optim.lr ↔ HPCTRAIN_OPTIM_LR), the INI key check and the
// "did you mean" suggestions. An entry knows how to read its field from a
// Config as text and how to parse + validate text into it, so adding an
// option is one line in options.cpp and nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace hpc::config {

// A value that does not parse or is out of range. The message says only what
// is wrong with the value ("must be > 0 (got -0.1)"); the caller, who knows
// which option and source it came from, prefixes that.
class BadValue : public std::runtime_error {
 public:
  explicit BadValue(const std::string& msg) : std::runtime_error(msg) {}
};

struct OptionSpec {
  std::string name;                               // "optim.lr"; top-level options have no dot ("resume")
  std::string group;                              // "optim" (the INI section); "" for top-level options
  std::string key;                                // "lr": the name inside the INI section
  std::string value_name;                         // shown in --help: FLOAT, INT, BOOL, PATH, "sgd|adam|adamw"
  std::string help;                               // one short line, with units
  std::vector<std::string> choices;               // allowed values of an enum option (for "did you mean")
  bool in_file = true;                            // may appear in an INI file and is written by to_ini()
  std::function<std::string(const Config&)> get;  // the field as text that set() reads back
  std::function<void(Config&, const std::string&)> set;  // parse + validate; throws BadValue
  // Set when the value can be without effect: why it has none in `cfg` (nullptr when it has one);
  // to_ini() says so beside the value.
  std::function<const char*(const Config&)> unused;
};

// All options in --help order (general first, then data, model, optim, …).
const std::vector<OptionSpec>& option_table();

// The entry named `name`, or nullptr.
const OptionSpec* find_option(std::string_view name);

// HPCTRAIN_ + the name upper-cased with '.' → '_': optim.lr → HPCTRAIN_OPTIM_LR.
std::string env_name(const OptionSpec& spec);

// The candidate closest to `word` when it is close enough to be a likely
// typo (optimal string alignment distance, so a swap of two letters counts
// once), or a candidate whose part after the last '.' equals `word`
// ("lr" → "optim.lr"); "" when none fits.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// ---- value parsing (values.cpp) ---------------------------------------------
// Each throws BadValue with the offending text quoted.

int64_t parse_int(std::string_view text);
uint64_t parse_uint(std::string_view text);
double parse_float(std::string_view text);               // finite values only
bool parse_bool(std::string_view text);                  // true/false/1/0/yes/no/on/off
std::vector<int> parse_int_list(std::string_view text);  // "512,512"; "" is the empty list

// Shortest text that parses back to exactly the same double (std::to_chars).
std::string format_float(double v);
std::string format_int_list(const std::vector<int>& v);

// A closed/open interval check for numeric options.
struct Range {
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;
};
// Throws BadValue("must be > 0 (got TEXT)") and the like when v is outside r.
void check_range(double v, const Range& r, std::string_view text);

// `text` lower-cased and trimmed if it is one of `choices`; otherwise
// BadValue listing them and the closest one.
std::string parse_choice(std::string_view text, const std::vector<std::string>& choices);

std::string trim(std::string_view s);

}  // namespace hpc::config
