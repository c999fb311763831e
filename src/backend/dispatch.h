// Helpers every backend op uses to pick an implementation.
//
// Ops dispatch on the tensors they are given: the device picks the backend
// (cpu/ or cuda/), the dtype picks the template instance. Layers therefore
// never contain device or dtype branches of their own.
#pragma once

#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace hpc::backend {

// Calls F.template operator()<T>() with T = float or double for a tensor's dtype.
// CPU compute is float32 in training and float64 in gradient checks.
template <typename F>
decltype(auto) dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32:
      return f.template operator()<float>();
    case DType::F64:
      return f.template operator()<double>();
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string(op) + ": unsupported dtype " + dtype_name(dtype));
}

// The CUDA backend does not exist for an op yet: say so instead of computing garbage.
[[noreturn]] void unsupported_device(const char* op, const Tensor& t);

inline bool on_cpu(const Tensor& t) { return t.device() == Device::CPU; }

}  // namespace hpc::backend
