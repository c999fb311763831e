// Fuzz target: the configuration layer (src/config: INI reader, option
// table, value parsing, Boost.Program_options command line, environment).
//
// Feeds: the input split at NUL bytes. The first piece is the contents of
// the INI file given as --config; every further piece is one argv word,
// except pieces of the form HPCTRAIN_NAME=VALUE, which are set in the
// environment for this input only. So "[optim]\nlr = 0.1\0train\0--data.path\0x.h5"
// is `hpctrain --config F train --data.path x.h5` with F holding the INI text
// (a command word after --config is an error the parser must report).
// Checks: parse_config ends in success or a UserError (--help/--version
// print to stdout, which goes to /dev/null). When it succeeds, to_ini() of
// the result must read back to the same configuration: run.dir/config.ini
// is how a run is repeated, so a value that does not survive the trip is a
// finding.
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/options.h"
#include "fuzz_util.h"

namespace {

constexpr const char* TARGET = "config";

// Sets HPCTRAIN_* variables for one input and removes them afterwards.
class EnvScope {
 public:
  void set(const std::string& assignment) {
    const size_t eq = assignment.find('=');
    const std::string name = assignment.substr(0, eq);
    if (name.find('\0') != std::string::npos || ::setenv(name.c_str(), assignment.c_str() + eq + 1, 1) != 0)
      return;
    names_.push_back(name);
  }
  ~EnvScope() {
    for (const std::string& n : names_) ::unsetenv(n.c_str());
  }

 private:
  std::vector<std::string> names_;
};

// Parses argv and returns whether a Config came out.
bool parse(const std::vector<std::string>& words, hpc::Config& out) {
  std::vector<const char*> argv;
  argv.reserve(words.size());
  for (const std::string& w : words) argv.push_back(w.c_str());
  return hpc::parse_config(static_cast<int>(argv.size()), argv.data(), out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::quiet_stdout();
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> pieces;
  for (size_t start = 0;;) {
    const size_t nul = input.find('\0', start);
    pieces.push_back(input.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }
  const std::string ini = fuzz::scratch().write("run.ini", pieces[0]);
  std::vector<std::string> words = {"hpctrain"};
  EnvScope env;
  for (size_t i = 1; i < pieces.size(); ++i) {
    if (pieces[i].starts_with("HPCTRAIN_") && pieces[i].find('=') != std::string::npos)
      env.set(pieces[i]);
    else
      words.push_back(pieces[i]);
  }
  // The command word, when given, must come first; the INI file follows it.
  const size_t at = words.size() > 1 && !words[1].empty() && words[1][0] != '-' ? 2 : 1;
  words.insert(words.begin() + static_cast<std::ptrdiff_t>(at), {"--config", ini});

  fuzz::expect_clean(TARGET, [&] {
    Config cfg;
    if (!parse(words, cfg)) return;
    // Round trip: the written INI, plus the options a file cannot hold that were set, on the command line.
    const std::string text = to_ini(cfg);
    const std::string again_ini = fuzz::scratch().write("again.ini", text);
    std::vector<std::string> again_words = {"hpctrain", name_of(cfg.command), "--config", again_ini};
    const Config defaults;
    for (const config::OptionSpec& s : config::option_table()) {
      if (s.in_file || s.name == "config") continue;
      const std::string v = s.get(cfg);
      if (v != s.get(defaults)) again_words.push_back("--" + s.name + "=" + v);
    }
    Config back;
    try {
      parse(again_words, back);
    } catch (const UserError& e) {
      fuzz::finding(TARGET, std::string("to_ini() output does not read back: ") + e.what() + "\n" + text);
    }
    fuzz::require(to_ini(back) == text, TARGET, "to_ini() round trip changed the configuration:\n" + text);
  });
  return 0;
}
