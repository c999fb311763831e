// INI files for the configuration (internal to src/config).
//
//   # comment            ; comment too
//   resume = auto        top-level options before the first section
//   [optim]
//   lr = 0.01            # inline comment: '#' or ';' after whitespace
//   [model]
//   spec = "conv(8,3) relu  # not a comment inside quotes"
//
// hpctrain reads the file itself instead of with po::parse_config_file so that
// every error names the line, ';' comments work, and a value may contain '#'
// (Boost cuts every line at the first '#'). The settings are then stored into
// the same po::variables_map as the other sources, so Boost still decides the
// precedence.
#pragma once

#include <string>
#include <vector>

namespace hpc::config {

struct IniSetting {
  std::string name;  // dotted option name: "optim.lr"
  std::string value;
  int line = 0;  // 1-based
};

// Reads and checks `path`: syntax, known sections and names, no name set
// twice. Throws UserError "FILE:LINE: …" (or naming --config when the file
// cannot be read).
std::vector<IniSetting> read_ini(const std::string& path);

// `value` as it must appear after "name = " so that read_ini returns it unchanged.
std::string ini_value(const std::string& value);

}  // namespace hpc::config
