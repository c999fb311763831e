// How many threads OpenBLAS may use in this rank.
//
// Several ranks on one node each starting one BLAS thread per core
// oversubscribe the node many times over, which is the most common reason a
// CPU job scales badly. So: an explicit OPENBLAS_NUM_THREADS / OMP_NUM_THREADS
// wins; else Slurm's SLURM_CPUS_PER_TASK; else the cores this process may
// run on divided by the ranks on this node.
#include "backend/cpu/threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/onednn.h"

namespace hpc::backend::cpu {

// oneDNN's OpenMP threads follow OpenBLAS's count: the same cores, and a fixed count keeps
// oneDNN's convolutions bitwise reproducible.
int configure_threads(int ranks_on_node) {
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char* v = std::getenv(name); v && std::atoi(v) > 0) {
      onednn::set_threads(std::atoi(v));
      return std::atoi(v);  // OpenBLAS read it already
    }
  int threads = 0;
  if (const char* v = std::getenv("SLURM_CPUS_PER_TASK")) threads = std::atoi(v);
  if (threads <= 0) {
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    threads = std::max(1, cores / std::max(1, ranks_on_node));
  }
  openblas_set_num_threads(threads);
  onednn::set_threads(threads);
  return threads;
}

}  // namespace hpc::backend::cpu
