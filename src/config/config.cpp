// parse_config(): command line, environment and INI file into one validated Config.
//
// Boost.Program_options does the collecting: every option is declared once
// (from the option table) as a string-valued option; the command line is
// stored first, then the environment (po::parse_environment with a name
// mapper), then the INI file. po::store keeps the first value it sees for an
// option, which is exactly "command line > environment > file > default".
// The typed parsing and validation happen afterwards, once per option, on the
// winning text only, so an error can say where that text came from. Boost's
// exceptions are translated where they are thrown; none escapes.
#include "config/config.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>

#include "backend/cpu/switches.h"
#include "config/ini.h"
#include "config/options.h"
#include "core/error.h"

namespace hpc {

namespace po = boost::program_options;
using config::option_table;
using config::OptionSpec;

namespace {

std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (const EnumName<Command>& c : enum_names<Command>()) names.emplace_back(c.name);
  return names;
}

// HPCTRAIN_* variables that are not options and are read elsewhere: fault
// injection (HPCTRAIN_FAULT*), test hooks (HPCTRAIN_TEST*), the BLAS core
// check's re-execution marker (HPCTRAIN_BLAS_CORE_FIX, backend/cpu/blas_core.cpp)
// and the job script's started file (HPCTRAIN_STARTED_FILE, train/started_file.h).
// The CPU backend's switches (HPCTRAIN_CPU_*, backend/cpu/switches.h) are
// checked by name and value. Any other HPCTRAIN_* variable that names no
// option is an error, like an unknown option: a misspelt HPCTRAIN_OPTIM_LRR
// must not be silently ignored.
const std::vector<std::string> ENV_NOT_OPTIONS = {"HPCTRAIN_FAULT", "HPCTRAIN_TEST", "HPCTRAIN_BLAS_CORE_FIX",
                                                  "HPCTRAIN_STARTED_FILE"};

const backend::cpu::SwitchSpec* cpu_switch(const std::string& var) {
  for (const backend::cpu::SwitchSpec& s : backend::cpu::switches())
    if (var == s.variable) return &s;
  return nullptr;
}

// A CPU switch takes its one value; empty is the default, like unset.
void check_switch_value(const backend::cpu::SwitchSpec& s) {
  const char* v = std::getenv(s.variable);
  if (v != nullptr && *v != '\0' && std::string(v) != s.value)
    throw UserError(std::string(s.variable) + "=" + v + ": its one value is " + s.value + " (" + s.effect +
                    "); unset it for the default");
}

constexpr const char* HOW_TO_MAKE_DATA = "make one with `hpcdata pack --from mnist-idx DIR -o train.h5`";

std::string did_you_mean(const std::string& near) {
  return near.empty() ? "" : "; did you mean " + near + "?";
}

po::options_description make_description() {
  po::options_description desc;
  for (const OptionSpec& s : option_table()) desc.add_options()(s.name.c_str(), po::value<std::string>(), "");
  desc.add_options()("help", "")("version", "");
  return desc;
}

std::vector<std::string> all_option_names(const char* prefix) {
  std::vector<std::string> names = {std::string(prefix) + "help", std::string(prefix) + "version"};
  for (const OptionSpec& s : option_table()) names.push_back(prefix + s.name);
  return names;
}

Command parse_command(const std::string& word) {
  for (const EnumName<Command>& c : enum_names<Command>())
    if (word == c.name) return c.value;
  std::string msg = "unknown command '" + word +
                    "' (commands: train, eval, predict, export, doctor, sample)" +
                    did_you_mean(config::closest_match(word, command_names()));
  if (word.ends_with(".ini")) msg += "; a config file is given as --config " + word;
  throw UserError(msg);
}

po::parsed_options parse_command_line(const std::vector<std::string>& args,
                                      const po::options_description& desc) {
  // No abbreviations: --optim.l must not quietly mean --optim.lr.
  int style = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;
  po::parsed_options parsed(&desc);
  try {
    parsed = po::command_line_parser(args).options(desc).style(style).run();
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    const size_t dashes = name.find_first_not_of('-');  // npos: the word is only dashes ("----")
    std::string bare = dashes == std::string::npos ? "" : name.substr(dashes);
    std::string near = config::closest_match(bare, all_option_names(""));
    throw UserError("unknown option " + name + did_you_mean(near.empty() ? "" : "--" + near) +
                    " (hpctrain --help lists the options)");
  } catch (const po::invalid_command_line_syntax& e) {
    if (e.kind() == po::invalid_command_line_syntax::missing_parameter)
      throw UserError("option " + e.get_option_name() + ": missing value (write " + e.get_option_name() +
                      " VALUE or " + e.get_option_name() + "=VALUE)");
    throw UserError(std::string("command line: ") + e.what());
  }
  // Boost takes the next word as the value even when it is another option
  // (`--optim.lr --train.steps 5`); that is a missing value, not a value.
  for (const po::option& o : parsed.options)
    if (o.value.size() == 1 && o.value[0].starts_with("--")) {
      std::string next = o.value[0].substr(2, o.value[0].find('=') - 2);
      if (config::find_option(next) || next == "help" || next == "version")
        throw UserError("option --" + o.string_key + ": missing value before " + o.value[0]);
    }
  // Without a positional description Boost keeps stray words as unnamed
  // options that po::store skips; they are almost always a mistake.
  for (const po::option& o : parsed.options)
    if (o.string_key.empty()) {
      std::string word = o.original_tokens.empty() ? "" : o.original_tokens.front();
      for (const std::string& c : command_names())
        if (word == c) throw UserError("unexpected argument '" + word + "': the command must come first");
      throw UserError("unexpected argument '" + word + "' (options are written --group.name VALUE)");
    }
  return parsed;
}

po::parsed_options parse_env(const po::options_description& desc, std::map<std::string, std::string>& where) {
  std::map<std::string, std::string> to_option;
  for (const OptionSpec& s : option_table()) to_option[config::env_name(s)] = s.name;
  std::vector<std::string> unknown;
  std::vector<const backend::cpu::SwitchSpec*> switches;
  po::parsed_options parsed = po::parse_environment(desc, [&](const std::string& var) -> std::string {
    if (!var.starts_with("HPCTRAIN_")) return "";
    if (auto it = to_option.find(var); it != to_option.end()) {
      where.emplace(it->second, "environment " + var);
      return it->second;
    }
    for (const std::string& prefix : ENV_NOT_OPTIONS)
      if (var.starts_with(prefix)) return "";
    if (const backend::cpu::SwitchSpec* s = cpu_switch(var)) {
      switches.push_back(s);
      return "";
    }
    unknown.push_back(var);
    return "";
  });
  for (const backend::cpu::SwitchSpec* s : switches) check_switch_value(*s);
  if (!unknown.empty()) {
    std::vector<std::string> known;
    known.reserve(to_option.size());
    for (const auto& entry : to_option) known.push_back(entry.first);
    for (const backend::cpu::SwitchSpec& s : backend::cpu::switches()) known.emplace_back(s.variable);
    std::sort(unknown.begin(), unknown.end());
    throw UserError("unknown environment variable " + unknown.front() +
                    did_you_mean(config::closest_match(unknown.front(), known)) +
                    " (HPCTRAIN_GROUP_NAME sets --group.name)");
  }
  return parsed;
}

po::parsed_options parse_file(const std::string& path, const po::options_description& desc,
                              std::map<std::string, std::string>& where) {
  po::parsed_options parsed(&desc);
  for (const config::IniSetting& s : config::read_ini(path)) {
    po::option o(s.name, {s.value});
    o.original_tokens = {s.name, s.value};
    parsed.options.push_back(o);
    where.emplace(s.name, path + ":" + std::to_string(s.line));
  }
  return parsed;
}

// Stores one source; multiple_occurrences can only come from the command
// line (the environment and read_ini hold each name once).
void store_source(const po::parsed_options& parsed, po::variables_map& vm) {
  try {
    po::store(parsed, vm);
  } catch (const po::multiple_occurrences& e) {
    throw UserError("option " + e.get_option_name() + " is given more than once");
  }
}

// One option of --help: name and value in a 32-column field, then the help
// wrapped at 100 columns; the default stays in one piece.
void print_option(std::ostream& os, const std::string& left, const std::string& help,
                  const std::string& fallback = "") {
  constexpr size_t INDENT = 35, WIDTH = 100;
  const std::string new_line = "\n" + std::string(INDENT - 1, ' ');
  os << "  " << std::left << std::setw(32) << left;
  size_t column = std::max<size_t>(2 + left.size(), INDENT - 1);
  if (left.size() >= 32) {
    os << new_line;
    column = INDENT - 1;
  }
  std::istringstream split(help);
  std::vector<std::string> words{std::istream_iterator<std::string>(split), {}};
  if (!fallback.empty()) words.push_back("(default: " + fallback + ")");
  for (const std::string& w : words) {
    if (column + 1 + w.size() > WIDTH && column > INDENT) {
      os << new_line;
      column = INDENT - 1;
    }
    os << " " << w;
    column += 1 + w.size();
  }
  os << "\n";
}

void print_help(std::ostream& os) {
  Config defaults;
  os << "usage: hpctrain [train|eval|predict|export|doctor|sample] [--config FILE] [--GROUP.NAME "
        "VALUE]...\n\n"
        "commands: train (default), eval (--checkpoint, --data.path), doctor (check the setup),\n"
        "          predict (--checkpoint, --data.path, --out preds.h5), export (--checkpoint, --format, -o "
        "DIR),\n"
        "          sample (--checkpoint; language models); eval, predict, sample and export also take\n"
        "          --model.init DIR|FILE (Hugging Face weights, export --format torch) instead of "
        "--checkpoint\n"
        "Every option can also be set in the environment as HPCTRAIN_GROUP_NAME (--optim.lr:\n"
        "HPCTRAIN_OPTIM_LR) and in the --config INI file as `name = value` under [group].\n"
        "Precedence: command line > environment > config file > default.\n"
        "--name=VALUE works too; BOOL is true/false, 1/0, yes/no or on/off.\n";
  std::string group = "-";
  for (const OptionSpec& s : option_table()) {
    if (s.group != group) {
      group = s.group;
      os << "\n" << (group.empty() ? "general" : group) << ":\n";
      if (group.empty()) {
        print_option(os, "--help", "this text");
        print_option(os, "--version", "versions of hpctrain and the libraries it was built with");
      }
    }
    std::string value = s.get(defaults);
    print_option(os, "--" + s.name + " " + s.value_name, s.help, value);
  }
}

// "option --optim.lr", plus " (from run.ini:4)" when the value did not come from the command line.
std::string option_label(const std::string& name, const std::map<std::string, std::string>& where) {
  auto it = where.find(name);
  bool elsewhere = it != where.end() && !it->second.empty();
  return "option --" + name + (elsewhere ? " (from " + it->second + ")" : "");
}

// Checks that involve more than one option or the command.
void check_combination(const Config& c, const std::map<std::string, std::string>& where) {
  if (c.command == Command::Train && c.train.steps <= 0 && c.train.epochs <= 0)
    throw UserError("options --train.epochs and --train.steps: one of them must be > 0 (got epochs=" +
                    std::to_string(c.train.epochs) + ", steps=" + std::to_string(c.train.steps) + ")");
  const bool evaluates = c.command == Command::Eval || c.command == Command::Predict;
  if ((c.command == Command::Train || evaluates) && c.data.path.empty())
    throw UserError(std::string("option --data.path: required for ") + name_of(c.command) +
                    " (an HDF5 dataset; " + HOW_TO_MAKE_DATA + ")");
  const bool from_model = evaluates || c.command == Command::Sample || c.command == Command::Export;
  if (from_model && c.checkpoint.empty() && c.model.init.empty())
    throw UserError(std::string("option --checkpoint: required for ") + name_of(c.command) +
                    " (a ckpt-STEP.h5 file of a run), or --model.init DIR|FILE (weights in the Hugging Face "
                    "layout or of `export --format torch`)");
  if (from_model && !c.checkpoint.empty() && !c.model.init.empty())
    throw UserError(std::string("options --checkpoint and --model.init: ") + name_of(c.command) +
                    " takes its model from one of them, not both");
  if (c.command == Command::Predict && c.eval.out.empty())
    throw UserError("option --out: required for predict (the HDF5 file to write, e.g. --out preds.h5)");
  if (c.command == Command::Export && c.eval.out.empty())
    throw UserError("option -o/--out: required for export (the directory to write, e.g. -o exported)");
  if (c.dist.sequence_parallel && c.dist.tp == 1)
    throw UserError(option_label("dist.sequence_parallel", where) +
                    ": needs tensor parallelism (--dist.tp 2 or more): with dist.tp 1 there is no group to "
                    "split the sequence over");
  if (c.train.batch_size % c.train.micro_batches != 0)
    throw UserError(option_label("train.micro_batches", where) + ": " +
                    std::to_string(c.train.micro_batches) + " does not divide train.batch_size " +
                    std::to_string(c.train.batch_size) +
                    " (each micro-batch holds batch_size / micro_batches samples)");
  if (c.dist.pp > 1 && c.train.micro_batches < c.dist.pp)
    throw UserError(option_label("train.micro_batches", where) + ": " +
                    std::to_string(c.train.micro_batches) + " is fewer than the " +
                    std::to_string(c.dist.pp) +
                    " pipeline stages (dist.pp): every stage needs a micro-batch in flight; use "
                    "--train.micro_batches " +
                    std::to_string(c.dist.pp) + " or more (the bubble shrinks as they grow)");
  if (c.dist.pp == 1 && c.dist.pp_virtual > 1)
    throw UserError(option_label("dist.pp_virtual", where) +
                    ": needs pipeline parallelism (--dist.pp 2 or more): it is the model chunks per stage");
  if (c.dist.pp == 1 && !c.dist.pp_split.empty())
    throw UserError(option_label("dist.pp_split", where) +
                    ": needs pipeline parallelism (--dist.pp 2 or more): it lists the blocks of each stage");
  const DistConfig defaults;
  if (c.dist.zero != 3)
    for (const auto& [name, changed] :
         {std::pair{"dist.zero_unit_mb", c.dist.zero_unit_mb != defaults.zero_unit_mb},
          std::pair{"dist.zero_keep_mb", c.dist.zero_keep_mb != defaults.zero_keep_mb},
          std::pair{"dist.zero_prefetch", c.dist.zero_prefetch != defaults.zero_prefetch}})
      if (changed)
        throw UserError(option_label(name, where) + ": applies to dist.zero 3 only (dist.zero is " +
                        std::to_string(c.dist.zero) + ")");
  if (c.dist.zero == 3 && !c.dist.overlap)
    throw UserError(option_label("dist.overlap", where) +
                    ": dist.zero 3 cannot be combined with dist.overlap false: stage 3 reduce-scatters each "
                    "unit's gradients as its backward ends, so that no rank ever holds all of them");
  // run.dir is where training (and the doctor's check of it) writes; the other commands write
  // beside the checkpoint or to --out. On their command line it would be silently ignored. (An
  // INI file or the environment shared with training may carry it.)
  if (c.command != Command::Train && c.command != Command::Doctor) {
    auto it = where.find("run.dir");
    if (it != where.end() && it->second.empty())
      throw UserError(std::string("option --run.dir: not used by 'hpctrain ") + name_of(c.command) + "' (" +
                      (c.command == Command::Eval ? "it writes eval.json beside the checkpoint, or to --out"
                       : c.command == Command::Sample ? "it prints the text"
                                                      : "it writes to --out") +
                      ")");
  }
  if (c.optim.schedule == ScheduleKind::Cosine && c.optim.min_lr > c.optim.lr)
    throw UserError(option_label("optim.min_lr", where) + ": must be <= optim.lr (got " +
                    config::format_float(c.optim.min_lr) + " > " + config::format_float(c.optim.lr) + ")");
}

bool parse(int argc, const char* const* argv, Config& out) {
  Config cfg;
  std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  if (!args.empty() && !args.front().empty() && args.front()[0] != '-') {
    cfg.command = parse_command(args.front());
    args.erase(args.begin());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o") args[i] = "--out";  // `export -o DIR`: the one short option, an alias of --out
    // `export --force`: a bare flag means true, as hpcdata's does (unless a BOOL follows).
    static const std::vector<std::string> bools = {"true", "false", "1", "0", "yes", "no", "on", "off"};
    if (args[i] == "--force" &&
        (i + 1 == args.size() || std::find(bools.begin(), bools.end(), args[i + 1]) == bools.end()))
      args[i] = "--force=true";
  }

  const po::options_description desc = make_description();
  po::variables_map vm;
  std::map<std::string, std::string> where;  // option name → where its value came from ("" = command line)
  po::parsed_options cli = parse_command_line(args, desc);
  for (const po::option& o : cli.options) where.emplace(o.string_key, "");
  store_source(cli, vm);
  if (vm.count("help")) {
    print_help(std::cout);
    return false;
  }
  if (vm.count("version")) {
    std::cout << version_report();
    return false;
  }
  store_source(parse_env(desc, where), vm);
  if (vm.count("config")) store_source(parse_file(vm["config"].as<std::string>(), desc, where), vm);

  for (const OptionSpec& s : option_table()) {
    if (!vm.count(s.name)) continue;
    const std::string& text = vm[s.name].as<std::string>();
    try {
      s.set(cfg, text);
    } catch (const config::BadValue& e) {
      throw UserError(option_label(s.name, where) + ": " + e.what());
    }
  }
  check_combination(cfg, where);
  out = std::move(cfg);
  return true;
}

}  // namespace

bool parse_config(int argc, const char* const* argv, Config& out) {
  try {
    return parse(argc, argv, out);
  } catch (const po::error& e) {
    // Every Boost error we expect is translated above; this keeps any other one a clean UserError.
    throw UserError(std::string("command line: ") + e.what());
  }
}

}  // namespace hpc
