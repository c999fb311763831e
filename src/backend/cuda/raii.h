// Owners for CUDA, cuBLAS and cuDNN resources: streams, events, library
// handles, cuDNN descriptors and raw device memory. Each frees its resource
// when it goes (move-only, like std::unique_ptr); a failure to free is
// logged, never thrown (destructors never throw).
//
// Tensors own their memory already (core/tensor.h); DeviceMemory is for the
// untyped scratch a library asks for (a cuDNN workspace, reduction partials).
#pragma once

#include <cstddef>
#include <utility>

#include "backend/cuda/check.h"
#include "backend/device.h"

namespace hpc::backend::cuda {

// Log a failed release (at exit, a runtime already shut down is not reported).
void destroy_failed(cudaError_t e);
void destroy_failed(cublasStatus_t s);
void destroy_failed(cudnnStatus_t s);

// Owns one handle H, released with Destroy(h).
template <typename H, auto Destroy>
class Owned {
 public:
  Owned() = default;
  explicit Owned(H h) : h_(h) {}
  ~Owned() { reset(); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }

  H get() const { return h_; }
  operator H() const { return h_; }  // NOLINT: passes straight into the library's calls
  explicit operator bool() const { return h_ != H{}; }

  void reset() {
    if (h_ == H{}) return;
    const auto status = Destroy(h_);
    if (status != decltype(status){}) destroy_failed(status);  // 0 is success in all three libraries
    h_ = H{};
  }

 private:
  H h_{};
};

using Stream = Owned<cudaStream_t, cudaStreamDestroy>;
using Event = Owned<cudaEvent_t, cudaEventDestroy>;
using CublasHandle = Owned<cublasHandle_t, destroy_cublas>;
using CudnnHandle = Owned<cudnnHandle_t, cudnnDestroy>;
using TensorDescriptor = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

// A stream that does not synchronise with the legacy default stream.
inline Stream make_stream() {
  cudaStream_t s = nullptr;
  cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

// An event for ordering streams (no timing: cheaper to record and wait on).
inline Event make_event(bool timing = false) {
  cudaEvent_t e = nullptr;
  cudaCheck(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

inline TensorDescriptor make_tensor_descriptor() {
  cudnnTensorDescriptor_t d = nullptr;
  cudnnCheck(cudnnCreateTensorDescriptor(&d));
  return TensorDescriptor(d);
}

inline FilterDescriptor make_filter_descriptor() {
  cudnnFilterDescriptor_t d = nullptr;
  cudnnCheck(cudnnCreateFilterDescriptor(&d));
  return FilterDescriptor(d);
}

inline ConvolutionDescriptor make_convolution_descriptor() {
  cudnnConvolutionDescriptor_t d = nullptr;
  cudnnCheck(cudnnCreateConvolutionDescriptor(&d));
  return ConvolutionDescriptor(d);
}

// Raw device bytes from backend::device_alloc (so they count in the memory
// statistics and an out-of-memory is the usual one-line error).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t num_bytes) : num_bytes_(num_bytes) {
    if (num_bytes_ > 0) data_ = device_alloc(num_bytes_);
  }
  ~DeviceMemory() { device_free(data_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), num_bytes_(std::exchange(o.num_bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      device_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      num_bytes_ = std::exchange(o.num_bytes_, 0);
    }
    return *this;
  }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t num_bytes() const { return num_bytes_; }

 private:
  void* data_ = nullptr;
  size_t num_bytes_ = 0;
};

}  // namespace hpc::backend::cuda
