// Communicator and GPU choice (see devices.h).
#include "dist/devices.h"

#include <map>

#include "core/error.h"

namespace hpc::dist {

CommBackend resolve_backend(CommBackend requested, Device training_device, bool cuda_built,
                            int visible_gpus) {
  const bool on_gpu = training_device == Device::CUDA;
  if (requested == CommBackend::Mpi) {
    if (on_gpu)
      throw UserError(
          "--dist.backend mpi: gradients live on the GPU, which MPI cannot reduce here; use "
          "--dist.backend nccl (or auto)");
    return CommBackend::Mpi;
  }
  if (requested == CommBackend::Auto) return on_gpu ? CommBackend::Nccl : CommBackend::Mpi;
  if (!cuda_built)
    throw UserError(
        "--dist.backend nccl: this hpctrain was built without CUDA (rebuild with nvcc present, "
        "CUDA=1), or use --dist.backend mpi");
  if (visible_gpus == 0)
    throw UserError(
        "--dist.backend nccl: no CUDA device is visible on this node (check CUDA_VISIBLE_DEVICES, "
        "--gpus-per-node, and 'singularity exec --nv'), or use --dist.backend mpi");
  if (!on_gpu)
    throw UserError(
        "--dist.backend nccl needs training on the GPU (--train.device cuda), but this run trains "
        "on the CPU: use --dist.backend mpi (or auto)");
  return CommBackend::Nccl;
}

int pick_device(int local_rank, int visible_gpus) {
  if (visible_gpus <= 0)
    throw UserError(
        "no CUDA device is visible to this rank (check CUDA_VISIBLE_DEVICES and --gpus-per-task)");
  return local_rank % visible_gpus;
}

std::string check_gpu_sharing(const std::vector<std::string>& bus_ids, const std::string& host) {
  std::map<std::string, std::vector<size_t>> users;
  for (size_t i = 0; i < bus_ids.size(); ++i) users[bus_ids[i]].push_back(i);
  for (const auto& [bus, ranks] : users) {
    if (ranks.size() < 2) continue;
    return std::to_string(bus_ids.size()) + " ranks on " + host + " but only " +
           std::to_string(users.size()) + " GPU(s): local ranks " + std::to_string(ranks[0]) + " and " +
           std::to_string(ranks[1]) + " would share GPU " + bus +
           ". Start one rank per GPU (srun --ntasks-per-node = --gpus-per-node, "
           "or mpirun -np <GPUs>)";
  }
  return "";
}

}  // namespace hpc::dist
