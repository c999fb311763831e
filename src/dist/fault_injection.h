// Test-only fault injection: make one rank misbehave at a chosen step, so
// that the failure paths (dead peer, stuck peer) can be tested end to end.
//
//   HPCTRAIN_TEST_STALL=RANK:STEP  rank RANK stops calling collectives when it
//                                  reaches optimizer step STEP (it sleeps, as a
//                                  rank stuck in a computation would)
//   HPCTRAIN_TEST_EXIT=RANK:STEP   rank RANK kills itself with SIGKILL there
//                                  (like `kill -9`, or a node that died)
//
// Read once at start-up (Context); the configuration layer ignores
// HPCTRAIN_TEST* variables, so they can never be mistaken for options.
#pragma once

#include <cstdint>

namespace hpc::dist {

struct FaultPlan {
  int stall_rank = -1;
  int64_t stall_step = 0;
  int exit_rank = -1;
  int64_t exit_step = 0;
  bool any() const { return stall_rank >= 0 || exit_rank >= 0; }
};

// nullptr or "" = no fault. Throws UserError on a malformed value.
FaultPlan parse_fault_plan(const char* stall, const char* exit);

// Called at the start of every optimizer step; returns unless this rank is
// the one chosen for this step (then it never returns).
void apply_faults(const FaultPlan& plan, int rank, int64_t step);

}  // namespace hpc::dist
