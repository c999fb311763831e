// Test-only fault injection (see fault_injection.h).
#include "dist/fault_injection.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace hpc::dist {

namespace {

void parse_one(const char* name, const char* text, int& rank, int64_t& step) {
  if (text == nullptr || *text == '\0') return;
  long long r = -1, s = -1;
  int used = 0;
  if (std::sscanf(text, "%lld:%lld%n", &r, &s, &used) != 2 || text[used] != '\0' || r < 0 || s < 1)
    throw UserError(std::string(name) + "='" + text + "': expected RANK:STEP (test-only fault injection)");
  rank = static_cast<int>(r);
  step = s;
}

}  // namespace

FaultPlan parse_fault_plan(const char* stall, const char* exit) {
  FaultPlan p;
  parse_one("HPCTRAIN_TEST_STALL", stall, p.stall_rank, p.stall_step);
  parse_one("HPCTRAIN_TEST_EXIT", exit, p.exit_rank, p.exit_step);
  return p;
}

void apply_faults(const FaultPlan& plan, int rank, int64_t step) {
  if (plan.exit_rank == rank && plan.exit_step == step) {
    std::fprintf(stderr, "hpctrain: rank %d: HPCTRAIN_TEST_EXIT: killing myself (SIGKILL) at step %lld\n",
                 rank, static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  if (plan.stall_rank == rank && plan.stall_step == step) {
    std::fprintf(stderr, "hpctrain: rank %d: HPCTRAIN_TEST_STALL: no more collectives from step %lld on\n",
                 rank, static_cast<long long>(step));
    std::fflush(stderr);
    // The others' dist.timeout ends the job; the bound only keeps a forgotten process from living forever.
    for (int s = 0; s < 3600; ++s) sleep(1);
    std::_Exit(EXIT_PEER);
  }
}

}  // namespace hpc::dist
