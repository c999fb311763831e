// backend/device.h for the CUDA build. Every query tolerates a machine
// without a driver or GPU: the same binary must run CPU-only there.
//
// Device memory goes straight to cudaMalloc (no caching allocator): model
// buffers, activations and layer scratch are allocated once and reused every
// step, so steady-state training allocates nothing. The bookkeeping here
// (bytes held, peak, largest allocation) is what the step table reports and
// what an out-of-memory message quotes. It is process-wide state, like the
// CUDA context it describes, and guarded by a mutex.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/device.h"
#include "core/error.h"

namespace hpc::backend {

namespace {

class MemoryLedger {
 public:
  void add(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    largest_ = std::max(largest_, bytes);
  }
  void remove(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    in_use_ -= it->second;
    sizes_.erase(it);
  }
  DeviceMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {in_use_, peak_, largest_, 0};
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = in_use_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0, largest_ = 0;
};

// Never destroyed: memory may be freed by other objects' destructors at exit,
// in any order relative to this one.
MemoryLedger& ledger() {
  static MemoryLedger* l = new MemoryLedger;
  return *l;
}

std::string mib(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1 << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

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
  s << ", cuDNN " << cudnn / 10000 << "." << (cudnn % 10000) / 100 << "." << cudnn % 100 << ", NCCL "
    << nccl / 10000 << "." << (nccl % 10000) / 100 << "." << nccl % 100;
  return s.str();
}

DeviceMemoryStats device_memory_stats() {
  DeviceMemoryStats s = ledger().stats();
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
    s.total = total;
  else
    cudaGetLastError();
  return s;
}

void reset_device_memory_peak() { ledger().reset_peak(); }

void cuda_set_device(int index) {
  const int n = cuda_device_count();
  if (index < 0 || index >= n)
    throw UserError("CUDA device " + std::to_string(index) + " does not exist (" + std::to_string(n) +
                    " visible: check CUDA_VISIBLE_DEVICES)");
  cudaCheck(cudaSetDevice(index));
}

void device_synchronize() { cudaCheck(cudaDeviceSynchronize()); }

void* cuda_compute_stream() { return cuda::Context::get().compute(); }

}  // namespace hpc::backend

// The seam of core/device_memory.h: a CUDA tensor's memory, counted in the
// ledger, and pinned host memory.
namespace hpc {

using backend::cuda_device_count;
using backend::device_memory_stats;
using backend::DeviceMemoryStats;
using backend::ledger;
using backend::mib;

void* device_alloc(size_t num_bytes) {
  void* p = nullptr;
  if (num_bytes == 0) return nullptr;
  const cudaError_t e = cudaMalloc(&p, num_bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it for the next call
    if (e != cudaErrorMemoryAllocation) cudaCheck(e);
    const DeviceMemoryStats s = device_memory_stats();
    int dev = 0;
    cudaGetDevice(&dev);
    throw UserError("out of GPU memory on cuda:" + std::to_string(dev) + " allocating " + mib(num_bytes) +
                    " (hpctrain holds " + mib(s.in_use) + " of " + mib(s.total) +
                    "; its largest allocation is " + mib(std::max(s.largest, num_bytes)) +
                    "): lower --train.batch_size or use --train.precision bf16");
  }
  // Tensors promise zero-filled memory; one memset at allocation, never per
  // step. It must be complete before we return: hpctrain's streams do not
  // synchronise with the legacy stream the memset runs on.
  cudaCheck(cudaMemsetAsync(p, 0, num_bytes, cudaStreamLegacy));
  cudaCheck(cudaStreamSynchronize(cudaStreamLegacy));
  ledger().add(p, num_bytes);
  return p;
}

void device_free(void* p) {
  if (p == nullptr) return;
  ledger().remove(p);
  // Kernels queued on hpctrain's non-blocking streams may still use p; freeing
  // is rare (never per step), so wait for the device rather than risk handing
  // the memory to the next cudaMalloc while they run.
  cudaWarn(cudaDeviceSynchronize());
  cudaWarn(cudaFree(p));
}

void* pinned_alloc(size_t num_bytes) {
  if (num_bytes == 0 || cuda_device_count() == 0) return nullptr;
  void* p = nullptr;
  if (cudaHostAlloc(&p, num_bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;  // pinned memory is an optimisation: the caller falls back to plain memory
  }
  return p;
}

void pinned_free(void* p) {
  if (p != nullptr) cudaWarn(cudaFreeHost(p));
}

}  // namespace hpc
