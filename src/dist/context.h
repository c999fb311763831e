// The distributed context of one process: MPI start-up, who am I, where am I.
//
// MPI does rank discovery under every launcher (srun --mpi=pmix, mpirun, or
// none: a lone process is world size 1). Local rank and local size come from
// MPI_Comm_split_type(SHARED), which is right under both srun and mpirun,
// unlike SLURM_LOCALID (0 on every rank under mpirun in an allocation).
//
// Thread level: MPI_THREAD_MULTIPLE, because two helper threads use MPI: the
// Watchdog (on its own communicator) answers "where are you?" while the main
// thread may be stuck, and MpiComm's progress thread moves gradient buckets
// along while backward computes; collectives are still started by the main
// thread only. If the library offers less, training works (progress only
// between layers) and a timeout still ends the job, but the report cannot
// name the culprit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/fault.h"
#include "dist/communicator.h"
#include "dist/group.h"
#include "dist/hang_report.h"
#include "dist/heartbeat.h"

namespace hpc::dist {

class MpiComm;
class Watchdog;

struct RankInfo {
  int rank = 0, world = 1;
  int local_rank = 0, local_size = 1;
  int node = 0, num_nodes = 1;  // node index (by first rank on it) and node count
  std::string host;
  int pid = 0;
};

class Context {
 public:
  // MPI_Init_thread; throws UserError on a broken launch (see check_launch) or a
  // malformed HPCTRAIN_FAULT variable (it installs the
  // process's fault plan, core/fault.h). dist.timeout bounds every collective.
  Context(int* argc, char*** argv, const DistConfig& cfg = DistConfig());
  ~Context();  // stops the watchdog, MPI_Finalize
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const RankInfo& info() const { return info_; }
  int rank() const { return info_.rank; }
  int world() const { return info_.world; }
  bool is_root() const { return info_.rank == 0; }
  // Host and pid of every rank (for hang reports).
  const std::vector<PeerInfo>& peers() const { return peers_; }
  double timeout() const { return cfg_.timeout; }
  // MPI_THREAD_MULTIPLE or less: whether a checkpoint thread may use MPI beside training.
  bool thread_multiple() const;

  // The communicator for host buffers (MPI over MPI_COMM_WORLD, or SelfComm for one process).
  Communicator& host_comm() { return *host_comm_; }
  // dist.backend (auto | mpi | nccl) for gradients on `device`: "mpi" or "nccl", or a
  // UserError saying why the choice cannot work here (nccl on a CPU run, without CUDA or a GPU).
  CommBackend check_backend(Device device) const;
  // The communicator for gradients that live on `device`, as dist.backend chooses
  // (one process: SelfComm whatever the backend, once the choice is checked).
  Communicator& grad_comm(Device device);
  // A new NCCL communicator over all ranks (device = local rank mod visible GPUs).
  // Throws UserError without CUDA, without a GPU, or with more ranks than GPUs on a node.
  std::unique_ptr<Communicator> make_nccl_comm();

  // One line per rank (host, pid, local rank, device) gathered to rank 0, in rank order.
  std::vector<std::string> gather_lines(const std::string& mine);

  // Everyone learns whether anyone failed during set-up: returns the lowest
  // failing rank (or -1) and the highest exit code among failures.
  std::pair<int, int> agree_on_failure(int my_exit_code);

  // The trainer calls this as each optimizer step begins (1-based): hang reports
  // say which step a rank was in, and the test-only fault injection fires here.
  void on_step(int64_t step);
  Heartbeat& heartbeat() { return hb_; }

  // The parallel grid (dist/grid.h) this process's groups come from: hang reports and flight records
  // name the groups by it. Set once, by the Grid, before its communicators exist.
  void set_grid_shape(const GridShape& shape);
  const GridShape& grid_shape() const { return shape_; }

  // Kills the whole job (every rank) with `exit_code`: the way out of a
  // failure that others may be blocked on.
  [[noreturn]] void abort(int exit_code);

 private:
  struct MpiSession {
    bool active = false;
    ~MpiSession();
  };
  MpiSession session_;  // first member: finalizes MPI last, also when the constructor throws
  DistConfig cfg_;
  RankInfo info_;
  GridShape shape_;  // {world, 1, 1} until a Grid sets it
  int thread_level_ = 0;
  std::vector<PeerInfo> peers_;
  Heartbeat hb_;
  std::unique_ptr<Watchdog> watchdog_;
  MpiComm* mpi_ = nullptr;  // host_comm_ when it is an MpiComm
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> device_comm_;
};

// "srun --mpi=… started N tasks but MPI sees world size 1" (a PMI mismatch:
// each task became its own rank 0). Returns the one-line diagnosis, or "" if fine.
std::string check_launch(int world_size);

}  // namespace hpc::dist
