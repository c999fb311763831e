// One failure path for the return codes of the C libraries hpctrain calls.
//
//   cudaCheck(cudaMemcpyAsync(...));    backend/cuda/check.h (also cublasCheck,
//   ncclCheck(ncclAllReduce(...));      cudnnCheck, ncclCheck, cudaLaunchCheck)
//   mpiCheck(MPI_Allgather(...));       dist/mpi_comm.h
//
// Each library's macro is one line over HPC_CHECK_CALL: what failure is, the
// library's message and the exit code. A failed call prints ONE line — the
// call as written, the library's message, file:line, rank, host (and the
// device) — and ends the whole job: MPI_Abort while MPI runs (installed by
// dist::Context through set_job_abort), else an immediate exit, so no rank is
// left waiting in a collective. Unwinding would be worse than useless there:
// most CUDA errors poison the context and a failed MPI call leaves the peers
// blocked, so every destructor on the way out would fail or hang again.
// Exit codes follow docs/outputs.md: 2 for out-of-memory (with a hint), 3 for
// a lost peer, 1 for everything else (a bug or broken hardware).
//
// HDF5 is the exception, on purpose: its failures come from files the user
// gave, so data::h5_check (data/h5_handle.h) throws a UserError naming the
// file, which the caller turns into exit 2 like any other bad input.
#pragma once

#include <string>

namespace hpc {

// Prints "hpctrain: error on rank R (HOST[, DEVICE]): LIBRARY call CALL
// failed: MESSAGE (FILE:LINE)[: HINT]" and ends the job with exit_code.
// device: "cuda:0" or nullptr; hint: nullptr, or what the user can do.
[[noreturn]] void fail_call(const char* library, const char* call, const std::string& message,
                            const char* file, int line, int exit_code, const char* device = nullptr,
                            const char* hint = nullptr);

// How a failed call ends the job. Default: std::_Exit(exit_code) without
// static destructors (they would call into a broken library). dist::Context
// installs MPI_Abort while MPI runs and takes it away at MPI_Finalize.
using JobAbort = void (*)(int exit_code);
void set_job_abort(JobAbort abort_job);

// This process's rank in messages: the launcher's (OMPI_COMM_WORLD_RANK,
// PMIX_RANK, PMI_RANK, SLURM_PROCID), -1 when none says.
int launcher_rank();

// This machine's host name ("?" when the system will not say), read once: the one source of
// the host in messages and rank tables (dist::RankInfo::host is this).
const std::string& host_name();

}  // namespace hpc

// `call` once; when `failed` (an expression of the result hpc_rc_) holds,
// fail_call with `message` and `exit_code` (expressions of hpc_rc_ too) and
// the trailing arguments of fail_call (device, hint).
#define HPC_CHECK_CALL(library, call, failed, message, exit_code, ...)                                       \
  do {                                                                                                       \
    const auto hpc_rc_ = (call);                                                                             \
    if (failed) ::hpc::fail_call(library, #call, (message), __FILE__, __LINE__, (exit_code), ##__VA_ARGS__); \
  } while (0)
