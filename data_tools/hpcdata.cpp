// hpcdata: the command line of the data tools (pack, inspect).
//
// Parsing is hand-written on purpose: a handful of flags per command, and
// every mistake must become one "hpcdata: …" line with exit 2. Errors from
// the commands arrive as hpc::Error and leave through the same door.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"

namespace {

using hpc::UserError;
using hpc::data_tools::PackMnistOptions;

constexpr const char* USAGE = R"(hpcdata: pack datasets into hpctrain's HDF5 layout, and inspect them

usage:
  hpcdata pack --from mnist-idx DIR -o OUT.h5 [--force] [--val-fraction F]
  hpcdata inspect FILE
  hpcdata --help | --version

pack --from mnist-idx DIR
  DIR holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
  and t10k-labels-idx1-ubyte, each plain or .gz (MNIST, Fashion-MNIST, EMNIST digits).
  Writes /train and /val (from t10k): x uint8 [N,1,28,28] with attributes
  scale=1/255 mean=0.1307 std=0.3081, y int32 with num_classes=10; datasets
  contiguous and 4 KiB-aligned so hpctrain can mmap them.
    -o, --output FILE   the output; written to FILE.tmp-PID, renamed when complete
    --force             replace FILE if it exists
    --val-fraction F    /val = a fixed-seed random fraction F of the train files
                        instead of t10k (t10k is then not read; 0 = no /val)

inspect FILE
  Lists every dataset (dtype, shape, layout and offset, attributes, class
  histogram), then validates each split as hpctrain would (all values scanned).

exit codes: 0 ok, 2 bad input or usage
)";

[[noreturn]] void usage_error(const std::string& msg) { throw UserError(msg + " (see hpcdata --help)"); }

bool is_help(const std::string& a) { return a == "-h" || a == "--help"; }

// "--name value" or "--name=value"; advances i past the value.
std::string option_value(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  const std::string& a = args[i];
  if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0) return a.substr(name.size() + 1);
  if (i + 1 >= args.size()) usage_error(name + " needs a value");
  return args[++i];
}

bool matches(const std::string& arg, const std::string& name) {
  return arg == name || arg.compare(0, name.size() + 1, name + "=") == 0;
}

double parse_fraction(const std::string& s) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  usage_error("--val-fraction expects a number, got '" + s + "'");
}

int cmd_pack(const std::vector<std::string>& args) {
  PackMnistOptions opt;
  std::string from;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (is_help(a)) {
      std::fputs(USAGE, stdout);
      return 0;
    } else if (matches(a, "--from")) {
      from = option_value(args, i, "--from");
    } else if (matches(a, "--output")) {
      opt.out = option_value(args, i, "--output");
    } else if (a == "-o") {
      opt.out = option_value(args, i, "-o");
    } else if (a == "--force") {
      opt.force = true;
    } else if (matches(a, "--val-fraction")) {
      opt.val_fraction = parse_fraction(option_value(args, i, "--val-fraction"));
    } else if (!a.empty() && a[0] == '-') {
      usage_error("pack: unknown option " + a);
    } else if (opt.dir.empty()) {
      opt.dir = a;
    } else {
      usage_error("pack: unexpected argument " + a);
    }
  }
  if (from.empty()) usage_error("pack needs --from mnist-idx");
  if (from != "mnist-idx") usage_error("pack: unknown --from " + from + "; this build supports mnist-idx");
  if (opt.dir.empty()) usage_error("pack --from mnist-idx needs a DIR");
  if (opt.out.empty()) usage_error("pack needs -o OUT.h5");
  hpc::data_tools::pack_mnist_idx(opt);
  return 0;
}

int cmd_inspect(const std::vector<std::string>& args) {
  if (args.size() == 1 && is_help(args[0])) {
    std::fputs(USAGE, stdout);
    return 0;
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') usage_error("usage: hpcdata inspect FILE");
  return hpc::data_tools::inspect_file(args[0]);
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) usage_error("no command given");
  const std::string& cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (is_help(cmd) || cmd == "help") {
    std::fputs(USAGE, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("hpcdata %s (%s)\n", HPCTRAIN_VERSION, HPCTRAIN_COMMIT);
    return 0;
  }
  if (cmd == "pack") return cmd_pack(rest);
  if (cmd == "inspect") return cmd_inspect(rest);
  usage_error(std::string(cmd[0] == '-' ? "unknown option " : "unknown command ") + cmd);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const hpc::Error& e) {
    std::fprintf(stderr, "hpcdata: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpcdata: internal error: %s\n", e.what());
    return hpc::EXIT_INTERNAL;
  }
}
