// dispatch_float: the dtype switch of loops over host memory (the CPU
// backend's ops, the datasets' gathers), so that one templated loop body
// serves float32 (training) and float64 (gradient checks). The device
// dispatch of the ops is in ops.cpp.
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

}  // namespace hpc::backend
