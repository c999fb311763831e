// One-word error checks for CUDA, cuBLAS, cuDNN and NCCL, over the one
// failure path of core/check.h (which says what a failure does and why).
//
//   cudaCheck(cudaMemcpyAsync(...));
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   cudaLaunchCheck();
//
// Here: which results are failures, and their exit codes — 2 for
// out-of-memory (with the hint to lower the batch size or the precision),
// 3 for a failed NCCL peer, 1 for everything else (a bug or a broken GPU).
//
// cudaWarn is for destructors: it reports a failure and carries on, because
// a destructor must never throw or abort.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "backend/cuda/cublas_api.h"
#include "core/check.h"

namespace hpc::backend::cuda {

// Prints the one-line report (unless the runtime is merely shutting down) and returns.
void warn(const char* call, cudaError_t err, const char* file, int line);

int exit_code_of(cudaError_t e);
int exit_code_of(cublasStatus_t s);
int exit_code_of(cudnnStatus_t s);
int exit_code_of(ncclResult_t r);
// "cuda:N", the current device, for the report.
const char* device_note();
// The hint for an exit code: what to do about an out-of-memory; nullptr otherwise.
const char* hint_for(int exit_code);

}  // namespace hpc::backend::cuda

#define HPC_CUDA_CHECK(library, call, failed, message)                                        \
  HPC_CHECK_CALL(library, call, failed, message, ::hpc::backend::cuda::exit_code_of(hpc_rc_), \
                 ::hpc::backend::cuda::device_note(),                                         \
                 ::hpc::backend::cuda::hint_for(::hpc::backend::cuda::exit_code_of(hpc_rc_)))

#define cudaCheck(call) HPC_CUDA_CHECK("CUDA", call, hpc_rc_ != cudaSuccess, cudaGetErrorString(hpc_rc_))
// After every kernel launch: a bad configuration (too many threads, too much
// shared memory) is reported here, at the launch, not at some later call.
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())
#define cublasCheck(call)                                          \
  HPC_CUDA_CHECK("cuBLAS", call, hpc_rc_ != CUBLAS_STATUS_SUCCESS, \
                 ::hpc::backend::cuda::cublas_api().status_string(hpc_rc_))
#define cudnnCheck(call) \
  HPC_CUDA_CHECK("cuDNN", call, hpc_rc_ != CUDNN_STATUS_SUCCESS, cudnnGetErrorString(hpc_rc_))
// ncclInProgress: a non-blocking communicator's call has been queued (nccl_comm.cu polls it).
#define ncclCheck(call)                                                             \
  HPC_CUDA_CHECK("NCCL", call, hpc_rc_ != ncclSuccess && hpc_rc_ != ncclInProgress, \
                 ncclGetErrorString(hpc_rc_))

#define cudaWarn(call) ::hpc::backend::cuda::warn(#call, (call), __FILE__, __LINE__)
