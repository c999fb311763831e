// Tensor, Shape and Buffer. Device memory is allocated through
// core/device_memory.h (defined by the backend), so this file knows nothing of CUDA.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/mem_ledger.h"

namespace hpc {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::U8:
      return 1;
    case DType::U16:
      return 2;
    case DType::I32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
    case DType::U8:
      return "uint8";
    case DType::U16:
      return "uint16";
    case DType::I32:
      return "int32";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

int64_t Shape::count() const {
  int64_t n = 1;
  // Dimensions come from user input (layer arguments, a data file's shape):
  // an overflowing product is a bad input, never a silently wrapped size.
  for (int64_t d : dims_)
    if (__builtin_mul_overflow(n, d, &n))
      throw UserError("a tensor of shape " + str() + " would have more than 2^63 elements");
  return n;
}

Shape Shape::with_batch(int64_t n) const {
  std::vector<int64_t> d{n};
  d.insert(d.end(), dims_.begin(), dims_.end());
  return Shape(std::move(d));
}

Shape Shape::without_batch() const {
  HPC_ASSERT(!dims_.empty(), "without_batch of a scalar shape");
  return Shape(std::vector<int64_t>(dims_.begin() + 1, dims_.end()));
}

std::string Shape::str() const {
  std::ostringstream s;
  for (size_t i = 0; i < dims_.size(); ++i) s << (i ? "x" : "") << dims_[i];
  return dims_.empty() ? "scalar" : s.str();
}

Buffer::Buffer(Device device, size_t num_bytes, bool pinned) : device_(device), num_bytes_(num_bytes) {
  if (num_bytes == 0) return;
  if (device == Device::CPU && pinned) data_ = pinned_alloc(num_bytes);
  if (data_ != nullptr) {
    pinned_ = true;
    std::memset(data_, 0, num_bytes);
  } else if (device == Device::CPU) {
    // 64-byte alignment: whole cache lines, and what AVX-512 loads like.
    size_t rounded = (num_bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
  } else {
    data_ = device_alloc(num_bytes);
  }
  mem_use_add(data_, num_bytes);
}

Buffer::~Buffer() {
  if (!data_) return;
  mem_use_remove(data_);
  if (pinned_)
    pinned_free(data_);
  else if (device_ == Device::CPU)
    std::free(data_);
  else
    device_free(data_);
}

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), dtype_(dtype), device_(device) {
  storage_ = std::make_shared<Buffer>(device, num_bytes());
  data_ = storage_->data();
}

Tensor Tensor::borrow(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::pinned(Shape shape, DType dtype) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Buffer>(Device::CPU, t.num_bytes(), true);
  t.data_ = t.storage_->data();
  return t;
}

Tensor Tensor::view(Shape shape) const {
  HPC_ASSERT(shape.count() == count(), "view " + shape.str() + " of a " + shape_.str() + " tensor");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.channel_block_ = 0;
  return t;
}

Tensor Tensor::slice(int64_t offset, Shape shape) const {
  HPC_ASSERT(offset >= 0 && offset + shape.count() <= count(),
             "slice out of range of a " + shape_.str() + " tensor");
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  t.channel_block_ = 0;
  return t;
}

Tensor Tensor::joined(const Tensor& next, Shape shape) const {
  HPC_ASSERT(storage_ == next.storage_ && dtype_ == next.dtype_ && device_ == next.device_ &&
                 static_cast<const char*>(data_) + num_bytes() == next.data_ &&
                 shape.count() == count() + next.count(),
             "joined: a " + next.shape_.str() + " tensor that does not follow this " + shape_.str() + " one");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.channel_block_ = 0;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  HPC_ASSERT(shape_.rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows out of range");
  std::vector<int64_t> d = shape_.dims();
  int64_t row = count() / (shape_[0] ? shape_[0] : 1);
  d[0] = end - begin;
  return slice(begin * row, Shape(d)).with_channel_block(channel_block_);
}

Tensor Tensor::with_channel_block(int64_t block) const {
  HPC_ASSERT(block == 0 || (block > 1 && shape_.rank() == 4 && shape_[1] % block == 0),
             "channel block " + std::to_string(block) + " of a " + shape_.str() + " tensor");
  Tensor t = *this;
  t.channel_block_ = block;
  return t;
}

void check_shape(const Tensor& t, const Shape& expected, const std::string& what) {
  if (t.shape() != expected)
    throw UserError(what + ": expected shape " + expected.str() + ", got " + t.shape().str());
}

}  // namespace hpc
