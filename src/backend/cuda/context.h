// The CUDA state a process needs once: its streams, the cuBLAS and cuDNN
// handles, scratch memory and the cuDNN convolution plans.
//
// Streams (all non-blocking with respect to the legacy default stream):
//   compute  every backend op, in program order — so ops need no events
//            between them, and a tensor written by one op is ready for the next;
//   transfer host→device batch uploads (pinned memory), overlapping compute;
//   comm     collectives (NcclComm), ordered after compute with events so that
//            gradient buckets reduce while backward continues.
// Kernel launchers in kernels/ take their stream as an argument; only this
// context decides which stream a backend op uses.
//
// This is process-wide state, like the CUDA context itself: created on the
// first CUDA op after the device was chosen (backend::cuda_set_device), and
// destroyed at exit before the CUDA runtime shuts down.
#pragma once

#include <cstddef>
#include <memory>

#include "backend/cuda/raii.h"

namespace hpc::backend::cuda {

class ConvPlans;  // conv_plans.h

class Context {
 public:
  // The context of this process's device, created on first use.
  static Context& get();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t compute() const { return compute_; }
  cudaStream_t transfer() const { return transfer_; }
  cudaStream_t comm() const { return comm_; }

  // Bound to the compute stream; created on first use (loading cuDNN takes a while).
  cublasHandle_t cublas();
  cudnnHandle_t cudnn();

  // Device scratch of at least num_bytes for work on the compute stream. The
  // pointer is valid until the next scratch() call: ops on the compute stream
  // run one after another, so one buffer serves them all.
  void* scratch(size_t num_bytes);
  // Pinned host bytes for results copied back from the compute stream (loss
  // sums, norms, flags); valid until the next host_result() call.
  void* host_result(size_t num_bytes);
  // Copies num_bytes from device memory into host_result() and waits for the
  // compute stream: the way every op that returns a number to the host ends.
  const void* read_back(const void* device_src, size_t num_bytes);

  ConvPlans& conv_plans();

 private:
  Context();

  int device_ = -1;
  Stream compute_, transfer_, comm_;
  CublasHandle cublas_;
  CudnnHandle cudnn_;
  DeviceMemory scratch_;
  void* host_result_ = nullptr;  // pinned (cudaHostAlloc), freed in the destructor
  size_t host_result_bytes_ = 0;
  std::unique_ptr<ConvPlans> conv_plans_;
};

}  // namespace hpc::backend::cuda
