// What the doctor concludes from everything the ranks reported: the list of
// findings. Pure functions of the gathered facts (no I/O, no MPI), so every
// rule is unit-tested with planted facts.
//
// A finding is ONE line saying what is wrong, where, and what to do about
// it. Problems make `hpctrain doctor` exit 1 ("needs fixing"): training
// would fail, or run far below what the allocation can do. Warnings are
// worth reading but do not change the exit code.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "doctor/facts.h"
#include "doctor/preflight.h"

namespace hpc::doctor {

enum class Severity { Problem, Warning };

struct Finding {
  Severity severity = Severity::Problem;
  std::string text;  // "what (where): fix"
};

// How the processes were started, as rank 0 sees it.
struct LaunchFacts {
  std::string launcher = "none";  // srun | mpirun | none
  int slurm_step_tasks = 0;       // SLURM_STEP_NUM_TASKS (0 outside an srun step)
  std::string slurm_job;          // SLURM_JOB_ID
  int world = 1;                  // MPI world size
  std::string pmi_problem;        // dist::check_launch's diagnosis when MPI and the launcher disagree
  bool local = false;             // --local: this process only
};

// Reads the launcher's environment variables of this process.
LaunchFacts launch_facts(int world, const std::string& pmi_problem, bool local);

std::vector<Finding> analyse(const Config& cfg, const LaunchFacts& launch,
                             const std::vector<RankFacts>& ranks, const Preflight& preflight);

// "0-3,5,7-8": a sorted list of ranks, with runs collapsed.
std::string rank_list(std::vector<int> ranks);

}  // namespace hpc::doctor
