// The failure path of check.h: one line naming the call, the library's
// message, file:line, rank and host; then the whole job ends.
#include "backend/cuda/check.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace hpc::backend::cuda {

namespace {

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// The world rank: from MPI when it runs, else from the launcher's environment (-1: unknown).
int world_rank() {
  if (mpi_running()) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
  }
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

int current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) d = -1;
  return d;
}

}  // namespace

void fail(const char* library, const char* call, const char* message, const char* file, int line,
          int exit_code) {
  char host[256] = "?";
  gethostname(host, sizeof host);
  const char* hint =
      exit_code == EXIT_BAD_INPUT ? ": lower --train.batch_size or use --train.precision bf16" : "";
  std::fprintf(stderr, "hpctrain: error on rank %d (%s, cuda:%d): %s call %s failed: %s (%s:%d)%s\n",
               world_rank(), host, current_device(), library, call, message, file, line, hint);
  std::fflush(stderr);
  std::fflush(stdout);
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // no static destructors: they would call into the broken context
}

void warn(const char* call, cudaError_t err, const char* file, int line) {
  // At process exit the runtime may already be gone; freeing then is moot, not an error.
  if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "hpctrain: warning: %s failed: %s (%s:%d)\n", call, cudaGetErrorString(err), file,
               line);
}

int exit_code_of(cudaError_t e) { return e == cudaErrorMemoryAllocation ? EXIT_BAD_INPUT : EXIT_INTERNAL; }
int exit_code_of(cublasStatus_t s) {
  return s == CUBLAS_STATUS_ALLOC_FAILED ? EXIT_BAD_INPUT : EXIT_INTERNAL;
}
int exit_code_of(cudnnStatus_t s) {
  return s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
                 s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED
             ? EXIT_BAD_INPUT
             : EXIT_INTERNAL;
}
int exit_code_of(ncclResult_t r) {
  // A remote or system error is a lost peer or network (docs/outputs.md: exit 3); the rest are bugs.
  return r == ncclRemoteError || r == ncclSystemError ? EXIT_PEER : EXIT_INTERNAL;
}

}  // namespace hpc::backend::cuda
