// cuBLAS, opened when the first GPU matrix product needs it.
//
// hpctrain does not link libcublas: loading it runs its and cuBLASLt's
// start-up code, about 0.4 s of CPU and 210 MiB of resident pages per
// process (measured on a 2-core AMD EPYC, CUDA 13), in every process of a
// CUDA build — CPU runs, `--help`, each rank of a CPU job — whether or not
// it ever multiplies on a GPU. The few entry points hpctrain calls are
// resolved with dlopen/dlsym on first use instead. Their types are checked
// against cuBLAS's own declarations when this compiles (cublas_api.cpp).
#pragma once

#include <cublas_v2.h>

namespace hpc::backend::cuda {

using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                        const void*, const void*, cudaDataType, int, const void*,
                                        cudaDataType, int, const void*, void*, cudaDataType, int,
                                        cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                                      int, int, int, const void*, const void*, cudaDataType,
                                                      int, long long, const void*, cudaDataType, int,
                                                      long long, const void*, void*, cudaDataType, int,
                                                      long long, int, cublasComputeType_t, cublasGemmAlgo_t);

// The cuBLAS calls hpctrain makes, named as in cuBLAS (cublasCreate → create, …).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  CublasGemmEx gemm_ex = nullptr;
  CublasGemmStridedBatchedEx gemm_strided_batched_ex = nullptr;
};

// Loads libcublas.so.<major of the headers> on the first call (thread-safe) and returns its entry
// points; a library that cannot be loaded or lacks one is a UserError (exit 2) naming it.
const CublasApi& cublas_api();

// cublasDestroy through cublas_api(), for the handle's owner (raii.h).
inline cublasStatus_t destroy_cublas(cublasHandle_t h) { return cublas_api().destroy(h); }

}  // namespace hpc::backend::cuda
