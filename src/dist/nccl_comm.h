// NcclComm: the Communicator for device buffers, over NCCL.
//
// The CUDA build implements it in dist/cuda/nccl_comm.cu (on the backend's
// streams and error checks); the CPU-only build links
// dist/nocuda/nccl_comm.cpp, whose factory throws "built without CUDA". This
// header needs neither CUDA nor MPI, so dist/ can call the factory in both
// builds.
//
// Bootstrap (nccl-tests style): rank 0 makes the unique id, the host
// communicator (MPI) broadcasts it, every rank calls ncclCommInitRankConfig
// with blocking = 0, so that no NCCL call can block forever: each one is
// followed by polling ncclCommGetAsyncError against dist.timeout.
// Collectives run on the backend's comm stream, after the compute stream
// the gradients are produced on (an event orders them); buckets started
// together go in one ncclGroupStart/End; averages use ncclAvg. A request's
// wait_on_device() (and allreduce_before_compute) makes the compute stream
// wait for the collective's end event instead of the host. A watchdog
// thread polls ncclCommGetAsyncError and the age of the oldest collective in
// flight; on an NCCL error or a timeout it calls ncclCommAbort (which also
// unblocks a main thread waiting on the stream), then on_fatal, which
// reports which rank is behind and ends the job with MPI_Abort, exit 3.
//
// The grid's groups (dist/grid.h) are split from the world's communicator
// with ncclCommSplit (non-blocking too, polled against dist.timeout); each
// keeps its group's numbering and name (dist/group.h) and its own watchdog.
// Sends and receives (the pipeline's) are ncclSend / ncclRecv, several in
// one ncclGroupStart/End (message_group), on the same stream and with the
// same event and deadline bookkeeping as the collectives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "dist/heartbeat.h"

namespace hpc::dist {

struct NcclSetup {
  Communicator* host = nullptr;  // MPI over the same ranks: carries the unique id
  int rank = 0, world = 1;
  GroupTag tag;             // the group it spans (empty ranks: the world of `world` ranks)
  int device = 0;           // CUDA device index of this rank
  double timeout_s = 300;   // dist.timeout, per collective
  Heartbeat* hb = nullptr;  // collective numbers for hang reports (may be null)
  // NCCL failed or a collective (or message) of `group` timed out at `at` (NCCL already aborted):
  // report and end the job. Called from the main thread or the watchdog thread; must not return.
  std::function<void(const GroupTag& group, const WaitPoint& at, const std::string& reason)> on_fatal;
  // cudaStream_t the buffers are written on, and the one the collectives run on;
  // null = the CUDA backend's compute and comm streams (backend/cuda/context.h).
  void* compute_stream = nullptr;
  void* comm_stream = nullptr;
};

// Throws UserError when NCCL cannot be used (CPU-only build, no GPU) or initialisation fails.
std::unique_ptr<Communicator> make_nccl_comm(const NcclSetup& setup);

}  // namespace hpc::dist
