// cuBLAS's entry points from dlopen (cublas_api.h says why).
#include "backend/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace hpc::backend::cuda {

// Each pointer type must be one of cuBLAS's own declarations of that function (some are
// overloaded in C++): the cast below compiles only if it is. Unevaluated, so nothing is linked.
template <typename F>
constexpr bool kDeclared = true;  // instantiated only if the cast in its argument compiles
static_assert(kDeclared<decltype(static_cast<CublasGemmEx>(&cublasGemmEx))>);
static_assert(kDeclared<decltype(static_cast<CublasGemmStridedBatchedEx>(&cublasGemmStridedBatchedEx))>);

namespace {

const std::string kLibrary = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);

template <typename F>
void resolve(void* lib, const char* symbol, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, symbol));  // NOLINT(*-reinterpret-cast): dlsym's contract
  if (out == nullptr) throw UserError("cuBLAS: " + kLibrary + " has no " + symbol + " (a different cuBLAS?)");
}

CublasApi load() {
  // RTLD_LOCAL: its symbols serve only these pointers. Never closed: handles live until exit.
  void* lib = ::dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    throw UserError("cannot load cuBLAS (" + kLibrary + "): " + ::dlerror() +
                    "; install CUDA's cuBLAS or add its lib64 folder to LD_LIBRARY_PATH");
  CublasApi api;
  resolve(lib, "cublasCreate_v2", api.create);
  resolve(lib, "cublasDestroy_v2", api.destroy);
  resolve(lib, "cublasSetStream_v2", api.set_stream);
  resolve(lib, "cublasGetStatusString", api.status_string);
  resolve(lib, "cublasGemmEx", api.gemm_ex);
  resolve(lib, "cublasGemmStridedBatchedEx", api.gemm_strided_batched_ex);
  return api;
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = load();  // thread-safe; a failed load throws again on the next call
  return api;
}

}  // namespace hpc::backend::cuda
