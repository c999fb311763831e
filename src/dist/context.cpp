// dist::Context (see context.h).
#include "dist/context.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "dist/mpi_comm.h"

namespace hpc::dist {

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

}  // namespace

std::string check_launch(int world_size) {
  // SLURM_STEP_NUM_TASKS exists only inside an srun step (not in the batch
  // script itself), so a single-process command in a batch script is fine.
  int slurm_tasks = env_int("SLURM_STEP_NUM_TASKS");
  if (world_size == 1 && slurm_tasks > 1)
    return "srun started " + std::to_string(slurm_tasks) +
           " tasks but MPI sees a world of 1: each task is its own rank 0 (PMI mismatch). Use "
           "'srun --mpi=pmix' (check 'srun --mpi=list'), or mpirun, and make the container's Open MPI "
           "match the host's";
  return "";
}

Context::Context(int* argc, char*** argv) {
  int provided = 0;
  // FUNNELED: only the main thread calls MPI (loader threads never do);
  // overlap comes from non-blocking collectives polled between layers.
  mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  finalize_ = true;
  // Errors come back as codes so mpiCheck can name the call before aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &info_.rank));
  mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &info_.world));

  MPI_Comm local;
  mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info_.rank, MPI_INFO_NULL, &local));
  mpiCheck(MPI_Comm_rank(local, &info_.local_rank));
  mpiCheck(MPI_Comm_size(local, &info_.local_size));
  // Node index = how many nodes' first ranks come before mine.
  int first_on_node = info_.rank;
  mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &first_on_node, 1, MPI_INT, MPI_MIN, local));
  MPI_Comm_free(&local);
  std::vector<int> firsts(static_cast<size_t>(info_.world));
  mpiCheck(MPI_Allgather(&first_on_node, 1, MPI_INT, firsts.data(), 1, MPI_INT, MPI_COMM_WORLD));
  info_.num_nodes = 0;
  for (int r = 0; r < info_.world; ++r)
    if (firsts[static_cast<size_t>(r)] == r) {
      if (r == first_on_node) info_.node = info_.num_nodes;
      ++info_.num_nodes;
    }

  char host[256] = "?";
  gethostname(host, sizeof host);
  info_.host = host;
  info_.pid = static_cast<int>(getpid());

  if (info_.world == 1)
    host_comm_ = std::make_unique<SelfComm>();
  else
    host_comm_ = std::make_unique<MpiComm>(MPI_COMM_WORLD, 300.0);

  std::string launch = check_launch(info_.world);
  if (!launch.empty()) {
    host_comm_.reset();
    MPI_Finalize();
    finalize_ = false;
    throw UserError(launch);
  }
}

Context::~Context() {
  host_comm_.reset();
  if (finalize_) MPI_Finalize();
}

std::vector<std::string> Context::gather_lines(const std::string& mine) {
  std::vector<std::string> out;
  if (info_.world == 1) return {mine};
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(info_.world));
  mpiCheck(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::vector<int> displs(static_cast<size_t>(info_.world), 0);
  int total = 0;
  for (int r = 0; r < info_.world; ++r) {
    displs[static_cast<size_t>(r)] = total;
    total += lens[static_cast<size_t>(r)];
  }
  std::string all(static_cast<size_t>(is_root() ? total : 0), '\0');
  mpiCheck(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
                       MPI_COMM_WORLD));
  if (!is_root()) return {};
  for (int r = 0; r < info_.world; ++r)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
  return out;
}

std::pair<int, int> Context::agree_on_failure(int my_exit_code) {
  int in[2] = {my_exit_code ? info_.rank : info_.world, my_exit_code};
  int lowest = in[0], code = in[1];
  if (info_.world > 1) {
    mpiCheck(MPI_Allreduce(&in[0], &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    mpiCheck(MPI_Allreduce(&in[1], &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  }
  return {lowest < info_.world ? lowest : -1, code};
}

void Context::abort(int exit_code) {
  if (info_.world > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace hpc::dist
