// Tensors: a typed, shaped view into a reference-counted buffer.
//
// A Tensor says everything about its memory: dtype, device, shape, element
// count and byte size. Views (Tensor::view, Tensor::slice) share the buffer;
// this is how every parameter and gradient tensor of a model points into the
// model's one flat parameter buffer and one flat gradient buffer.
// Copies between devices are always explicit (backend::copy).
//
// Channel-blocked layout: a [N, C, H, W] activation may hold its elements in
// oneDNN's nChw16c (or nChw8c) order instead of NCHW, i.e. as
// [N, C/B, H, W, B] with B = channel_block(): the B channels of a block side
// by side, one vector wide. Only CPU float32 activations between layers
// that understand it are blocked (nn/layout.h decides which); the shape
// stays the logical NCHW one, and views that reshape (view, slice) are plain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hpc {

enum class DType { F32, F64, BF16, F16, U8, U16, I32 };
enum class Device { CPU, CUDA };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* device_name(Device d);

// Dimensions of a tensor, outermost first (NCHW for images).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t count() const;  // product of dims (1 for rank 0)
  const std::vector<int64_t>& dims() const { return dims_; }
  // The same shape with a leading batch dimension.
  Shape with_batch(int64_t n) const;
  // The shape without its leading dimension.
  Shape without_batch() const;
  std::string str() const;  // "32x28x28"
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  std::vector<int64_t> dims_;
};

// Owns num_bytes of memory on one device; frees it when the last owner goes.
// Host memory may be pinned (page-locked, for asynchronous copies to a GPU)
// when `pinned` is asked for and a GPU is there to pin it for.
class Buffer {
 public:
  Buffer(Device device, size_t num_bytes, bool pinned = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t num_bytes() const { return num_bytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  Device device_;
  size_t num_bytes_;
  void* data_ = nullptr;
  bool pinned_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates a new buffer, zero-filled.
  Tensor(Shape shape, DType dtype, Device device = Device::CPU);
  // Wraps memory the caller keeps alive (e.g. an mmapped dataset).
  static Tensor borrow(void* data, Shape shape, DType dtype, Device device = Device::CPU);
  // Zero-filled host memory that is pinned when a GPU is present (plain host
  // memory otherwise): the source of asynchronous host→device copies.
  static Tensor pinned(Shape shape, DType dtype);

  bool defined() const { return data_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t count() const { return shape_.count(); }
  size_t num_bytes() const { return static_cast<size_t>(count()) * dtype_size(dtype_); }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  // Same memory, another shape with the same element count.
  Tensor view(Shape shape) const;
  // Elements [offset, offset + count) of the flattened tensor, as a tensor of `shape`.
  Tensor slice(int64_t offset, Shape shape) const;
  // Rows [begin, end) of the leading dimension (a blocked tensor's rows stay blocked).
  Tensor rows(int64_t begin, int64_t end) const;
  // This tensor and `next`, which must follow it directly in the same buffer
  // (adjacent parameters of a model's flat buffer), as one tensor of `shape`.
  Tensor joined(const Tensor& next, Shape shape) const;

  // 0: plain (NCHW); B > 1: channel-blocked by B (above).
  int64_t channel_block() const { return channel_block_; }
  // The same memory, read as channel-blocked by `block` (0: plain); [N, C, H, W] with C % block == 0.
  Tensor with_channel_block(int64_t block) const;

 private:
  std::shared_ptr<Buffer> storage_;  // empty for borrowed memory
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  int64_t channel_block_ = 0;
};

// Throws UserError naming `what` when shapes differ (an API-boundary check).
void check_shape(const Tensor& t, const Shape& expected, const std::string& what);

}  // namespace hpc
