// The CPU-only build's answers to backend/device.h: there is no GPU.
#include "backend/device.h"
#include "core/error.h"

namespace hpc::backend {

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
DeviceInfo cuda_device_info(int) { throw UserError("this hpctrain was built without CUDA"); }
std::string cuda_versions() { return "CUDA not built"; }

DeviceMemoryStats device_memory_stats() { return {}; }
void reset_device_memory_peak() {}
void cuda_set_device(int) { throw UserError("this hpctrain was built without CUDA: use --train.device cpu"); }
void device_synchronize() {}
void* cuda_compute_stream() { return nullptr; }

}  // namespace hpc::backend

// The seam of core/device_memory.h: no device memory without CUDA.
namespace hpc {

void* device_alloc(size_t) {
  throw UserError("this hpctrain was built without CUDA: use --train.device cpu");
}
void device_free(void*) {}
void* pinned_alloc(size_t) { return nullptr; }
void pinned_free(void*) {}

}  // namespace hpc
