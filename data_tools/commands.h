// The hpcdata sub-commands. Each throws hpc::UserError (one line, exit 2)
// on bad input; hpcdata.cpp owns argument parsing, --help and exit codes.
#pragma once

#include <optional>
#include <string>

namespace hpc::data_tools {

struct PackMnistOptions {
  std::string dir;   // holds the 4 standard MNIST file names, plain or .gz
  std::string out;   // output .h5
  bool force = false;
  // Unset: /val is the t10k files. Set: /val is this fraction of the train
  // files (a fixed-seed random subset, both splits keep file order) and t10k
  // is not read; 0 writes no /val.
  std::optional<double> val_fraction;
};

// hpcdata pack --from mnist-idx: prints one summary line on success.
void pack_mnist_idx(const PackMnistOptions& opt);

// hpcdata inspect: prints the file's datasets, then validates each split the
// way hpctrain would. Returns the exit code (0 valid, 2 not).
int inspect_file(const std::string& path);

}  // namespace hpc::data_tools
