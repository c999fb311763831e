// Which devices this process can use, and raw device memory.
//
// The CUDA build implements these in backend/cuda/device.cu; the CPU-only
// build links backend/nocuda/device.cpp, whose answers are "no GPU".
#pragma once

#include <cstddef>
#include <string>

namespace hpc::backend {

struct DeviceInfo {
  int index = -1;
  std::string name;
  std::string pci_bus_id;
  size_t total_bytes = 0;
};

bool cuda_built();           // compiled with the CUDA backend
int cuda_device_count();     // 0 when no driver or no GPU (never throws)
DeviceInfo cuda_device_info(int index);
std::string cuda_versions();  // "CUDA runtime 13.0, driver 13.0, cuDNN 9.x, NCCL 2.28" or "not built"

void* device_alloc(size_t num_bytes);
void device_free(void* p);

}  // namespace hpc::backend
