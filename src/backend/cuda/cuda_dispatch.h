// Helpers the CUDA ops share: the dtype → storage-type dispatch (float,
// double, Bf16, Half), typed device pointers, and the device check that turns
// "a CPU tensor reached a GPU op" into a clear internal error instead of an
// illegal-address crash several kernels later.
#pragma once

#include <library_types.h>

#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cast_math.h"

namespace hpc::backend::cuda {

// The cuBLAS data type of a floating dtype; `op` names the caller in the internal error otherwise.
inline cudaDataType_t cuda_data_type(DType t, const char* op) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::F64:
      return CUDA_R_64F;
    case DType::BF16:
      return CUDA_R_16BF;
    case DType::F16:
      return CUDA_R_16F;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string(op) + " (CUDA): unsupported dtype " + dtype_name(t));
}

// Calls f.template operator()<T>() with the storage type of dtype.
template <typename F>
decltype(auto) dispatch_storage(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32:
      return f.template operator()<float>();
    case DType::F64:
      return f.template operator()<double>();
    case DType::BF16:
      return f.template operator()<kernels::Bf16>();
    case DType::F16:
      return f.template operator()<kernels::Half>();
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string(op) + " (CUDA): unsupported dtype " + dtype_name(dtype));
}

// The DType of a storage type.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, kernels::Bf16>)
    return DType::BF16;
  else if constexpr (std::is_same_v<T, kernels::Half>)
    return DType::F16;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::U8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else
    static_assert(!sizeof(T), "no DType for this type");
}

// Every defined tensor must live on the GPU.
inline void require_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    HPC_ASSERT(!t->defined() || t->device() == Device::CUDA,
               std::string(op) + ": a " + device_name(t->device()) + " tensor " + t->shape().str() +
                   " among CUDA operands (the model and its data must be on one device)");
}

// The tensor's memory as T*, after checking it holds T (nullptr when undefined).
template <typename T>
T* ptr(const Tensor& t, const char* op) {
  if (!t.defined()) return nullptr;
  HPC_ASSERT(t.dtype() == dtype_of<T>(), std::string(op) + ": a " + dtype_name(t.dtype()) + " tensor where " +
                                             dtype_name(dtype_of<T>()) + " was expected");
  return t.data<T>();
}

}  // namespace hpc::backend::cuda
