// `hpctrain doctor`: checks in one command, under the same launcher as
// training (srun, mpirun, or alone), that an allocation is ready: versions,
// ranks per node and hosts, each rank's device, the launch (PMI), InfiniBand
// and the NCCL/UCX/Open MPI environment, the data file, the run directory,
// and a short AllReduce preflight. Rank 0 gathers and prints the report
// (text, or JSON with --json). Exit 0: all well; 1: something needs fixing
// (each problem is one line with its fix); 2 / 3 as for training (bad
// option, a peer lost during the preflight).
//
// --local checks this process only and never starts MPI: for a container's
// %test, a login node, or a machine without a launcher.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace hpc::doctor {

constexpr int EXIT_NEEDS_FIXING = 1;

// argv for parse_config with doctor's switches written out: a bare --json or
// --local (not followed by a value) becomes --json=true, because every
// option in the table takes a value. Other commands' words pass unchanged.
class Args {
 public:
  Args(int argc, const char* const* argv);
  int argc() const { return static_cast<int>(ptrs_.size()); }
  const char* const* argv() const { return ptrs_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<const char*> ptrs_;
};

// Runs the doctor (starting MPI itself unless cfg.local) and returns the
// process exit code.
int run(const Config& cfg, int* argc, char*** argv);

}  // namespace hpc::doctor
