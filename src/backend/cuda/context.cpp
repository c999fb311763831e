// Context (see context.h).
#include "backend/cuda/context.h"

#include <algorithm>
#include <cstdio>

#include "backend/cuda/conv_plans.h"

namespace hpc::backend::cuda {

void destroy_failed(cudaError_t e) {
  if (e != cudaErrorCudartUnloading)
    std::fprintf(stderr, "hpctrain: warning: releasing a CUDA resource failed: %s\n", cudaGetErrorString(e));
}
void destroy_failed(cublasStatus_t s) {
  std::fprintf(stderr, "hpctrain: warning: releasing a cuBLAS handle failed: %s\n",
               cublas_api().status_string(s));
}
void destroy_failed(cudnnStatus_t s) {
  std::fprintf(stderr, "hpctrain: warning: releasing a cuDNN resource failed: %s\n", cudnnGetErrorString(s));
}

Context& Context::get() {
  static Context ctx;  // thread-safe initialisation; destroyed at exit before the runtime
  return ctx;
}

Context::Context() {
  cudaCheck(cudaGetDevice(&device_));
  compute_ = make_stream();
  transfer_ = make_stream();
  comm_ = make_stream();
  conv_plans_ = std::make_unique<ConvPlans>();
}

Context::~Context() {
  if (host_result_ != nullptr) cudaWarn(cudaFreeHost(host_result_));
}

cublasHandle_t Context::cublas() {
  if (!cublas_) {
    cublasHandle_t h = nullptr;
    cublasCheck(cublas_api().create(&h));
    cublas_ = CublasHandle(h);
    cublasCheck(cublas_api().set_stream(h, compute_));
  }
  return cublas_;
}

cudnnHandle_t Context::cudnn() {
  if (!cudnn_) {
    cudnnHandle_t h = nullptr;
    cudnnCheck(cudnnCreate(&h));
    cudnn_ = CudnnHandle(h);
    cudnnCheck(cudnnSetStream(h, compute_));
  }
  return cudnn_;
}

void* Context::scratch(size_t num_bytes) {
  if (num_bytes > scratch_.num_bytes()) {
    // Grow geometrically so a slowly growing request does not reallocate each
    // time. device_free waits for the device, so work still using the old
    // buffer has finished before it goes.
    const size_t grown = std::max(num_bytes, scratch_.num_bytes() * 2);
    scratch_ = DeviceMemory();  // free first: the old and the new need not fit together
    scratch_ = DeviceMemory(grown);
  }
  return scratch_.data();
}

void* Context::host_result(size_t num_bytes) {
  if (num_bytes > host_result_bytes_) {
    if (host_result_ != nullptr) cudaCheck(cudaFreeHost(host_result_));
    host_result_ = nullptr;
    host_result_bytes_ = std::max<size_t>(num_bytes, 4096);
    cudaCheck(cudaHostAlloc(&host_result_, host_result_bytes_, cudaHostAllocPortable));
  }
  return host_result_;
}

const void* Context::read_back(const void* device_src, size_t num_bytes) {
  void* dst = host_result(num_bytes);
  cudaCheck(cudaMemcpyAsync(dst, device_src, num_bytes, cudaMemcpyDeviceToHost, compute_));
  cudaCheck(cudaStreamSynchronize(compute_));
  return dst;
}

ConvPlans& Context::conv_plans() { return *conv_plans_; }

}  // namespace hpc::backend::cuda
