// The CUDA side of the checks (check.h): exit codes, the device and the hint
// for the one-line report of core/check.h, and the destructors' warnings.
#include "backend/cuda/check.h"

#include <cstdio>

#include "core/error.h"

namespace hpc::backend::cuda {

const char* device_note() {
  static thread_local char note[32];
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) d = -1;
  std::snprintf(note, sizeof note, "cuda:%d", d);
  return note;
}

const char* hint_for(int exit_code) {
  return exit_code == EXIT_BAD_INPUT ? "lower --train.batch_size or use --train.precision bf16" : nullptr;
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
