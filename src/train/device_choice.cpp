// train.device resolution (see device_choice.h).
#include "train/device_choice.h"

#include "core/error.h"

namespace hpc::train {

Device resolve_device(DeviceChoice want, const DeviceView& view) {
  if (want == DeviceChoice::Cpu) return Device::CPU;
  if (want == DeviceChoice::Auto)
    return view.cuda_built && view.visible_gpus > 0 && view.every_rank_has_gpu ? Device::CUDA : Device::CPU;
  if (!view.cuda_built)
    throw UserError(
        "--train.device cuda: this hpctrain was built without CUDA (rebuild with nvcc present, CUDA=1)");
  if (view.visible_gpus == 0)
    throw UserError(
        "--train.device cuda: no CUDA device is visible on this node (check CUDA_VISIBLE_DEVICES, "
        "--gpus-per-node, and 'singularity exec --nv')");
  if (!view.every_rank_has_gpu)
    throw UserError("--train.device cuda: rank " + std::to_string(view.first_rank_without_gpu) +
                    " sees no CUDA device (check CUDA_VISIBLE_DEVICES and --gpus-per-node on every node), "
                    "or use --train.device cpu");
  return Device::CUDA;
}

}  // namespace hpc::train
