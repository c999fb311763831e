// The distributed context of one process: MPI start-up, who am I, where am I.
//
// MPI does rank discovery under every launcher (srun --mpi=pmix, mpirun, or
// none: a lone process is world size 1). Local rank and local size come from
// MPI_Comm_split_type(SHARED), which is right under both srun and mpirun,
// unlike SLURM_LOCALID (0 on every rank under mpirun in an allocation).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace hpc::dist {

struct RankInfo {
  int rank = 0, world = 1;
  int local_rank = 0, local_size = 1;
  int node = 0, num_nodes = 1;  // node index (by first rank on it) and node count
  std::string host;
  int pid = 0;
};

class Context {
 public:
  // MPI_Init_thread; throws UserError on a broken launch (see check_launch).
  Context(int* argc, char*** argv);
  ~Context();  // MPI_Finalize
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const RankInfo& info() const { return info_; }
  int rank() const { return info_.rank; }
  int world() const { return info_.world; }
  bool is_root() const { return info_.rank == 0; }
  // The communicator for host buffers (MPI over MPI_COMM_WORLD, or SelfComm for one process).
  Communicator& host_comm() { return *host_comm_; }
  // One line per rank (host, pid, local rank, device) gathered to rank 0, in rank order.
  std::vector<std::string> gather_lines(const std::string& mine);

  // Everyone learns whether anyone failed during set-up: returns the lowest
  // failing rank (or -1) and the highest exit code among failures.
  std::pair<int, int> agree_on_failure(int my_exit_code);

  // Kills the whole job (every rank) with `exit_code`: the way out of a
  // failure that others may be blocked on.
  [[noreturn]] void abort(int exit_code);

 private:
  RankInfo info_;
  std::unique_ptr<Communicator> host_comm_;
  bool finalize_ = false;
};

// "srun --mpi=… started N tasks but MPI sees world size 1" (a PMI mismatch:
// each task became its own rank 0). Returns the one-line diagnosis, or "" if fine.
std::string check_launch(int world_size);

}  // namespace hpc::dist
