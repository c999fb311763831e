// train.device = auto | cpu | cuda, resolved: which device a rank trains on.
//
// Pure functions (no CUDA, no MPI), so the rules are unit-tested on machines
// without a GPU; the Trainer feeds them this rank's view and the ranks'
// agreement (one small allreduce).
//
//   cpu   the CPU, without asking the CUDA runtime anything.
//   cuda  the GPU local rank mod the visible ones (one rank per GPU, also
//         with several ranks: gradients then go through NCCL), or a one-line
//         UserError when this build has no CUDA or this rank sees no GPU. Two
//         ranks landing on one GPU is refused later, by the NCCL set-up, which
//         compares the PCI bus ids the ranks of a node picked
//         (dist::check_gpu_sharing): with srun --gpus-per-task every rank sees
//         one device (index 0), so the counts alone cannot tell.
//   auto  the GPU when this build has CUDA and EVERY rank sees one, else the
//         CPU on every rank: one rank on the CPU would leave the others
//         waiting in NCCL, so the choice must be the same everywhere.
#pragma once

#include "config/config.h"
#include "core/tensor.h"

namespace hpc::dist {
class Context;
}

namespace hpc::train {

struct DeviceView {
  bool cuda_built = false;
  int visible_gpus = 0;            // this rank's (0 when not asked: train.device cpu)
  bool every_rank_has_gpu = true;  // all ranks see at least one GPU (true for one rank: its own view decides)
  int first_rank_without_gpu = -1;  // the lowest rank that sees none (-1: none), for messages
};

// The device, or UserError naming the option and what is missing.
Device resolve_device(DeviceChoice want, const DeviceView& view);

// Whether resolve_device needs the GPU count and the ranks' agreement (not for cpu).
inline bool device_needs_probe(DeviceChoice want) { return want != DeviceChoice::Cpu; }

// This rank's device for `want`, asked of the CUDA runtime and agreed by the
// ranks (one Max allreduce when there are several); the GPU is made current.
// Defined in setup.cpp; the trainer and `hpctrain eval` / `predict` use it.
Device resolve_rank_device(DeviceChoice want, dist::Context& ctx);

}  // namespace hpc::train
