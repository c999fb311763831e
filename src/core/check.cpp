// The failure path of every return-code check (see check.h).
#include "core/check.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace hpc {

namespace {

[[noreturn]] void exit_now(int exit_code) { std::_Exit(exit_code); }

// Installed once by dist::Context before its threads start; read when a call fails.
std::atomic<JobAbort> job_abort{exit_now};

}  // namespace

const std::string& host_name() {
  static const std::string name = [] {
    char host[256] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    return std::string(host);
  }();
  return name;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

void set_job_abort(JobAbort abort_job) { job_abort.store(abort_job ? abort_job : exit_now); }

void fail_call(const char* library, const char* call, const std::string& message, const char* file, int line,
               int exit_code, const char* device, const char* hint) {
  std::fprintf(stderr, "hpctrain: error on rank %d (%s%s%s): %s call %s failed: %s (%s:%d)%s%s\n",
               launcher_rank(), host_name().c_str(), device ? ", " : "", device ? device : "", library, call,
               message.c_str(), file, line, hint ? ": " : "", hint ? hint : "");
  std::fflush(stderr);
  std::fflush(stdout);
  job_abort.load()(exit_code);
  std::_Exit(exit_code);  // an abort handler that returned
}

}  // namespace hpc
