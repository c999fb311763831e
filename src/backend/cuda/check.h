// One-word error checks for CUDA, cuBLAS, cuDNN and NCCL (mpiCheck, for MPI,
// lives in dist/mpi_comm.h and behaves the same way).
//
//   cudaCheck(cudaMemcpyAsync(...));
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   cudaLaunchCheck();
//
// A failed call prints ONE line — the call as written, the library's
// message, file:line, rank and host — and ends the whole job: MPI_Abort when
// MPI is running (so no rank is left waiting in a collective), else an
// immediate exit. Unwinding would be worse than useless here: most CUDA
// errors poison the context, so every destructor on the way out would fail
// again. Exit codes follow docs/outputs.md: 2 for out-of-memory (with the hint to
// lower the batch size or the precision), 3 for a failed NCCL peer, 1 for
// everything else (a bug or a broken GPU).
//
// cudaWarn is for destructors: it reports a failure and carries on, because
// a destructor must never throw or abort.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

namespace hpc::backend::cuda {

// Prints the one-line report and ends the job with exit_code. Never returns.
[[noreturn]] void fail(const char* library, const char* call, const char* message, const char* file, int line,
                       int exit_code);
// Prints the one-line report (unless the runtime is merely shutting down) and returns.
void warn(const char* call, cudaError_t err, const char* file, int line);

int exit_code_of(cudaError_t e);
int exit_code_of(cublasStatus_t s);
int exit_code_of(cudnnStatus_t s);
int exit_code_of(ncclResult_t r);

}  // namespace hpc::backend::cuda

#define cudaCheck(call)                                                                           \
  do {                                                                                            \
    const cudaError_t hpc_err_ = (call);                                                          \
    if (hpc_err_ != cudaSuccess)                                                                  \
      ::hpc::backend::cuda::fail("CUDA", #call, cudaGetErrorString(hpc_err_), __FILE__, __LINE__, \
                                 ::hpc::backend::cuda::exit_code_of(hpc_err_));                   \
  } while (0)

// After every kernel launch: a bad configuration (too many threads, too much
// shared memory) is reported here, at the launch, not at some later call.
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

#define cublasCheck(call)                                                                             \
  do {                                                                                                \
    const cublasStatus_t hpc_st_ = (call);                                                            \
    if (hpc_st_ != CUBLAS_STATUS_SUCCESS)                                                             \
      ::hpc::backend::cuda::fail("cuBLAS", #call, cublasGetStatusString(hpc_st_), __FILE__, __LINE__, \
                                 ::hpc::backend::cuda::exit_code_of(hpc_st_));                        \
  } while (0)

#define cudnnCheck(call)                                                                           \
  do {                                                                                             \
    const cudnnStatus_t hpc_st_ = (call);                                                          \
    if (hpc_st_ != CUDNN_STATUS_SUCCESS)                                                           \
      ::hpc::backend::cuda::fail("cuDNN", #call, cudnnGetErrorString(hpc_st_), __FILE__, __LINE__, \
                                 ::hpc::backend::cuda::exit_code_of(hpc_st_));                     \
  } while (0)

#define ncclCheck(call)                                                                          \
  do {                                                                                           \
    const ncclResult_t hpc_rc_ = (call);                                                         \
    if (hpc_rc_ != ncclSuccess && hpc_rc_ != ncclInProgress)                                     \
      ::hpc::backend::cuda::fail("NCCL", #call, ncclGetErrorString(hpc_rc_), __FILE__, __LINE__, \
                                 ::hpc::backend::cuda::exit_code_of(hpc_rc_));                   \
  } while (0)

#define cudaWarn(call) ::hpc::backend::cuda::warn(#call, (call), __FILE__, __LINE__)
