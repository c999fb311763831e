// Reading INI configuration files (see ini.h) and writing one: to_ini().
//
// The writer and the reader share one quoting rule (ini_value ↔ parse_value)
// so that to_ini() output always reads back to the same Config: a value is
// written bare unless the reader would change it (surrounding spaces, a
// comment marker after whitespace, a leading quote), then it is quoted with
// \" \\ \n escapes.
#include "config/ini.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/config.h"
#include "config/options.h"
#include "core/error.h"

namespace hpc::config {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Position of an inline comment: '#' or ';' at the start or after whitespace.
size_t comment_start(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if ((s[i] == '#' || s[i] == ';') && (i == 0 || is_space(s[i - 1]))) return i;
  return std::string::npos;
}

bool blank_or_comment(const std::string& rest) {
  std::string t = trim(rest);
  return t.empty() || t[0] == '#' || t[0] == ';';
}

// The value part of "name = value"; throws BadValue on a bad quoted value.
std::string parse_value(const std::string& raw) {
  std::string s = trim(raw);
  if (s.empty() || s[0] != '"') {
    size_t c = comment_start(s);
    return trim(c == std::string::npos ? s : s.substr(0, c));
  }
  std::string out;
  size_t i = 1;
  for (; i < s.size() && s[i] != '"'; ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) break;
    if (s[i] == 'n')
      out += '\n';
    else if (s[i] == '"' || s[i] == '\\')
      out += s[i];
    else
      throw BadValue(std::string("unknown escape \\") + s[i] + " in quoted value (use \\\" \\\\ \\n)");
  }
  if (i >= s.size()) throw BadValue("missing closing '\"'");
  if (!blank_or_comment(s.substr(i + 1))) throw BadValue("unexpected text after the closing '\"'");
  return out;
}

std::vector<std::string> file_option_names() {
  std::vector<std::string> names;
  for (const OptionSpec& s : option_table())
    if (s.in_file) names.push_back(s.name);
  return names;
}

}  // namespace

std::string ini_value(const std::string& value) {
  bool bare = value == trim(value) && value.find('\n') == std::string::npos &&
              (value.empty() || value[0] != '"') && comment_start(value) == std::string::npos;
  if (bare) return value;
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out + "\"";
}

std::vector<IniSetting> read_ini(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UserError("option --config: '" + path + "' is a directory, expected an INI file");
  std::ifstream in(path);
  if (!in) throw UserError("option --config: cannot read '" + path + "': " + std::strerror(errno));

  const std::vector<std::string> names = file_option_names();
  std::set<std::string> sections;
  for (const OptionSpec& s : option_table())
    if (s.in_file && !s.group.empty()) sections.insert(s.group);

  std::vector<IniSetting> out;
  std::map<std::string, int> first_line;
  std::string section, line;
  auto fail = [&](int n, const std::string& msg) -> UserError {
    return UserError(path + ":" + std::to_string(n) + ": " + msg);
  };
  for (int n = 1; std::getline(in, line); ++n) {
    if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
    if (!line.empty() && line.back() == '\r') line.pop_back();           // written on Windows
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;

    if (t[0] == '[') {
      size_t close = t.find(']');
      if (close == std::string::npos) throw fail(n, "missing ']' in section header '" + t + "'");
      if (!blank_or_comment(t.substr(close + 1)))
        throw fail(n, "unexpected text after '" + t.substr(0, close + 1) + "'");
      section = trim(t.substr(1, close - 1));
      if (!sections.count(section)) {
        std::string near = closest_match(section, {sections.begin(), sections.end()});
        std::string known;
        for (const std::string& s : sections) known += (known.empty() ? "" : " ") + ("[" + s + "]");
        throw fail(n, "unknown section [" + section + "]" +
                          (near.empty() ? " (known: " + known + ")" : "; did you mean [" + near + "]?"));
      }
      continue;
    }

    size_t eq = t.find('=');
    if (eq == std::string::npos) throw fail(n, "expected 'name = value' or '[section]', got '" + t + "'");
    std::string key = trim(t.substr(0, eq));
    if (key.empty()) throw fail(n, "missing name before '='");
    std::string name = section.empty() ? key : section + "." + key;
    const OptionSpec* spec = find_option(name);
    if (spec && !spec->in_file) throw fail(n, name + " cannot be set inside a config file");
    if (!spec) {
      std::string near = closest_match(name, names);
      throw fail(n, "unknown option " + name + (section.empty() ? "" : " ([" + section + "] " + key + ")") +
                        (near.empty() ? "" : "; did you mean " + near + "?"));
    }
    auto [it, fresh] = first_line.emplace(name, n);
    if (!fresh) throw fail(n, name + " is set twice (first on line " + std::to_string(it->second) + ")");
    try {
      out.push_back({name, parse_value(t.substr(eq + 1)), n});
    } catch (const BadValue& e) {
      throw fail(n, name + ": " + e.what());
    }
  }
  if (in.bad()) throw UserError("option --config: error reading '" + path + "'");
  return out;
}

}  // namespace hpc::config

namespace hpc {

std::string to_ini(const Config& cfg) {
  using config::OptionSpec;
  // Top-level options must precede the first section, whatever the table order.
  std::vector<std::string> groups = {""};
  for (const OptionSpec& s : config::option_table())
    if (s.in_file && std::find(groups.begin(), groups.end(), s.group) == groups.end())
      groups.push_back(s.group);

  std::ostringstream os;
  os << "# hpctrain configuration, fully resolved (command: " << name_of(cfg.command) << ").\n"
     << "# Repeat the run with: hpctrain " << name_of(cfg.command) << " --config THIS_FILE\n";
  for (const std::string& group : groups) {
    if (!group.empty()) os << "\n[" << group << "]\n";
    for (const OptionSpec& s : config::option_table())
      if (s.in_file && s.group == group) {
        std::string value = config::ini_value(s.get(cfg));
        os << s.key << (value.empty() ? " =" : " = " + value);
        if (const char* why = s.unused ? s.unused(cfg) : nullptr) os << "  # not used: " << why;
        os << "\n";
      }
  }
  return os.str();
}

}  // namespace hpc
