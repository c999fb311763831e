// Which devices this process can use, and raw device memory.
//
// The CUDA build implements these in backend/cuda/device.cpp; the CPU-only
// build links backend/nocuda/device.cpp, whose answers are "no GPU".
#pragma once

#include <cstddef>
#include <string>

#include "core/device_memory.h"  // device_alloc, pinned_alloc and their frees: defined by the backend

namespace hpc::backend {

struct DeviceInfo {
  int index = -1;
  std::string name;
  std::string pci_bus_id;
  size_t total_bytes = 0;
};

bool cuda_built();        // compiled with the CUDA backend
int cuda_device_count();  // 0 when no driver or no GPU (never throws)
DeviceInfo cuda_device_info(int index);
std::string cuda_versions();  // "CUDA runtime 13.0, driver 13.0, cuDNN 9.x, NCCL 2.28" or "not built"

// Device memory held through device_alloc: now, at the peak since the last
// reset, the largest single allocation, and the device's capacity (bytes).
struct DeviceMemoryStats {
  size_t in_use = 0, peak = 0, largest = 0, total = 0;
};
DeviceMemoryStats device_memory_stats();
void reset_device_memory_peak();

// Makes CUDA device `index` this process's device; UserError when there is none such.
void cuda_set_device(int index);
// Waits for all work queued on this process's device (tests, timing).
void device_synchronize();
// The stream every backend op runs on (a cudaStream_t), for code that must
// order its own GPU work after the ops' (NcclComm's collectives); nullptr
// without CUDA. Call it after cuda_set_device.
void* cuda_compute_stream();

}  // namespace hpc::backend
