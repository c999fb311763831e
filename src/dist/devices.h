// Which communicator and which GPU a rank uses: the rules, as pure functions.
//
// dist.backend = auto | mpi | nccl. NCCL moves device buffers only, so it
// needs a CUDA build, a visible GPU and training on the GPU; asking for it
// otherwise is a UserError that says which of the three is missing (never a
// silent fallback: a user who asked for NCCL on a GPU node and got MPI would
// see a mysteriously slow run). auto = nccl when training on the GPU.
//
// GPU choice: device = local rank modulo the devices this rank sees. Under
// `srun --gpus-per-task=1` every rank sees one device (index 0) and the
// modulo is what makes that work; with all devices visible, two ranks of a
// node on one GPU means more ranks than GPUs, which NCCL cannot run: that is
// detected by comparing the PCI bus ids the ranks of a node picked.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "core/tensor.h"

namespace hpc::dist {

// The backend a run uses (Mpi or Nccl, never Auto), or throws UserError naming
// the option and what is missing.
CommBackend resolve_backend(CommBackend requested, Device training_device, bool cuda_built, int visible_gpus);

// Device index for a rank; throws UserError when no GPU is visible.
int pick_device(int local_rank, int visible_gpus);

// bus_ids[i] is the PCI bus id local rank i picked, hosts the node's name.
// Returns "" when every rank has its own GPU, else the one-line problem.
std::string check_gpu_sharing(const std::vector<std::string>& bus_ids, const std::string& host);

}  // namespace hpc::dist
