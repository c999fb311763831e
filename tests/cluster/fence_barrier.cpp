// Is Open MPI's PMIx fence a barrier across nodes? (tests/e2e/multinode_train.sh)
//
//   fence_barrier DIR        (every rank of a job launched by srun --mpi=pmix)
//
// The last rank waits 3 s, creates DIR/last-rank-finalizes, then calls
// MPI_Finalize; rank 0 calls MPI_Finalize at once and then looks for that
// file. MPI_Finalize ends with a PMIx fence that collects no data, the same
// kind as the barrier at the end of MPI_Init: if it waits for every rank,
// the file is there when rank 0's MPI_Finalize returns, however slow the
// machine. Slurm's mpi/pmix runs such fences as a tree, and with fewer nodes
// than TreeWidth every node completes them alone: then rank 0 returns first
// and the file is missing (unless its own MPI_Finalize took over 3 s). That is
// what made a rank leave MPI_Init early and crash another (slurm/common.sh,
// hpctrain_pmix_fence). Rank 0 prints "barrier" or "no barrier".
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string mark = std::string(argc > 1 ? argv[1] : ".") + "/last-rank-finalizes";
  if (rank == size - 1 && size > 1) {
    sleep(3);
    if (std::FILE* f = std::fopen(mark.c_str(), "w")) std::fclose(f);
  }
  MPI_Finalize();
  if (rank == 0) std::printf("%s\n", access(mark.c_str(), F_OK) == 0 ? "barrier" : "no barrier");
  return 0;
}
