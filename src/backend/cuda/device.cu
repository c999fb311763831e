// backend/device.h for the CUDA build. Every query tolerates a machine
// without a driver or GPU: the same binary must run CPU-only there.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <sstream>

#include "backend/device.h"
#include "core/error.h"

namespace hpc::backend {

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

DeviceInfo cuda_device_info(int index) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess)
    throw UserError("cannot query CUDA device " + std::to_string(index));
  DeviceInfo d;
  d.index = index;
  d.name = p.name;
  char bus[32];
  cudaDeviceGetPCIBusId(bus, sizeof bus, index);
  d.pci_bus_id = bus;
  d.total_bytes = p.totalGlobalMem;
  return d;
}

std::string cuda_versions() {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  int nccl = 0;
  ncclGetVersion(&nccl);
  size_t cudnn = cudnnGetVersion();
  std::ostringstream s;
  s << "CUDA runtime " << rt / 1000 << "." << (rt % 1000) / 10 << ", driver ";
  if (drv)
    s << drv / 1000 << "." << (drv % 1000) / 10;
  else
    s << "none";
  s << ", cuDNN " << cudnn / 10000 << "." << (cudnn % 10000) / 100 << "." << cudnn % 100
    << ", NCCL " << nccl / 10000 << "." << (nccl % 10000) / 100 << "." << nccl % 100;
  return s.str();
}

void* device_alloc(size_t num_bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, num_bytes);
  if (e != cudaSuccess)
    throw UserError("out of GPU memory allocating " + std::to_string(num_bytes >> 20) +
                    " MiB (" + cudaGetErrorString(e) +
                    "): lower --train.batch_size or use --train.precision bf16");
  return p;
}

void device_free(void* p) { cudaFree(p); }

}  // namespace hpc::backend
