// Parsing and checking of option values: numbers, bools, lists, enums.
//
// Every option value reaches hpctrain as text (command line, environment, INI
// file), so the strictness lives here: a number must be the whole text ("1e"
// and "5x" are errors, not 1 and 5), doubles must be finite, integers may be
// written as 1e5 only when that is exactly an integer. Errors quote the text
// the user wrote, so the message matches what they typed rather than a
// re-formatted number.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "config/options.h"

namespace hpc::config {

namespace {

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string r;
  for (size_t i = 0; i < items.size(); ++i) r += (i ? sep : "") + items[i];
  return r;
}

}  // namespace

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

double parse_float(std::string_view raw) {
  std::string text = trim(raw);
  if (text.empty()) throw BadValue("expected a number, got an empty value");
  // strtod rather than from_chars: it also reads a leading '+', which people write.
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') throw BadValue("not a number: " + quoted(raw));
  if (!std::isfinite(v)) throw BadValue("must be a finite number (got " + std::string(raw) + ")");
  return v;
}

int64_t parse_int(std::string_view raw) {
  std::string text = trim(raw);
  if (text.empty()) throw BadValue("expected an integer, got an empty value");
  std::string_view digits = text;
  if (digits.front() == '+') {
    digits.remove_prefix(1);
    if (digits.empty() || digits.front() == '+' || digits.front() == '-')
      throw BadValue("not an integer: " + quoted(raw));
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc() && ptr == digits.data() + digits.size()) return v;
  if (ec == std::errc::result_out_of_range) throw BadValue("integer out of range: " + quoted(raw));
  // 1e5 or 2.0: accepted when the value is exactly an integer.
  double d;
  try {
    d = parse_float(text);
  } catch (const BadValue&) {
    throw BadValue("not an integer: " + quoted(raw));
  }
  if (d != std::trunc(d)) throw BadValue("not an integer: " + quoted(raw));
  if (std::fabs(d) >= 9.2e18) throw BadValue("integer out of range: " + quoted(raw));
  return static_cast<int64_t>(d);
}

uint64_t parse_uint(std::string_view raw) {
  std::string text = trim(raw);
  if (!text.empty() && text.front() == '-') throw BadValue("must be >= 0 (got " + std::string(raw) + ")");
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range) throw BadValue("integer out of range: " + quoted(raw));
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size())
    throw BadValue("not a non-negative integer: " + quoted(raw));
  return v;
}

bool parse_bool(std::string_view raw) {
  std::string t = lower(trim(raw));
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  throw BadValue("not a boolean: " + quoted(raw) + " (use true/false, 1/0, yes/no, on/off)");
}

std::vector<int> parse_int_list(std::string_view raw) {
  std::vector<int> out;
  std::string text = trim(raw);
  if (text.empty()) return out;
  size_t pos = 0;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string item = trim(std::string_view(text).substr(pos, comma - pos));
    int64_t v = 0;
    try {
      v = item.empty() ? 0 : parse_int(item);
    } catch (const BadValue&) {
      v = 0;  // reported below with the whole list, which says more than one item would
    }
    if (v <= 0 || v > std::numeric_limits<int>::max())
      throw BadValue("must be a comma-separated list of positive integers like 512,512 (got " + quoted(raw) +
                     ")");
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_float(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ptr);
}

std::string format_int_list(const std::vector<int>& v) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
  return r;
}

void check_range(double v, const Range& r, std::string_view text) {
  bool below = r.lo_open ? !(v > r.lo) : !(v >= r.lo);
  bool above = r.hi_open ? !(v < r.hi) : !(v <= r.hi);
  if (!below && !above) return;
  std::string got = " (got " + trim(text) + ")";
  if (std::isinf(r.hi))
    throw BadValue(std::string("must be ") + (r.lo_open ? "> " : ">= ") + format_float(r.lo) + got);
  throw BadValue("must be in " + std::string(r.lo_open ? "(" : "[") + format_float(r.lo) + ", " +
                 format_float(r.hi) + (r.hi_open ? ")" : "]") + got);
}

std::string parse_choice(std::string_view raw, const std::vector<std::string>& choices) {
  std::string t = lower(trim(raw));
  if (std::find(choices.begin(), choices.end(), t) != choices.end()) return t;
  std::string msg = "unknown value " + quoted(raw) + " (allowed: " + join(choices, ", ") + ")";
  std::string near = closest_match(t, choices);
  if (!near.empty()) msg += "; did you mean " + near + "?";
  throw BadValue(msg);
}

}  // namespace hpc::config
