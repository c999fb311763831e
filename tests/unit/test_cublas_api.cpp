// cuBLAS opened on first use (backend/cuda/cublas_api.h): the library loads and every entry point
// resolves on a machine with CUDA installed, GPU or not; nothing was loaded before the first call.
#include <gtest/gtest.h>

#if HPCTRAIN_CUDA
#include <link.h>

#include <string>

#include "backend/cuda/cublas_api.h"

namespace {

// Whether a shared object whose path contains `name` is mapped into this process.
bool loaded(const std::string& name) {
  struct Search {
    std::string name;
    bool found = false;
  } s{name};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::string(info->dlpi_name).find(q->name) != std::string::npos)
          q->found = true;
        return 0;
      },
      &s);
  return s.found;
}

TEST(CublasApi, LoadsOnFirstUseWithEveryEntryPoint) {
  EXPECT_FALSE(loaded("libcublas")) << "linked or loaded before the first call";
  const hpc::backend::cuda::CublasApi& api = hpc::backend::cuda::cublas_api();
  EXPECT_TRUE(loaded("libcublas.so"));
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.destroy, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.gemm_ex, nullptr);
  EXPECT_NE(api.gemm_strided_batched_ex, nullptr);
  ASSERT_NE(api.status_string, nullptr);
  const std::string alloc = api.status_string(CUBLAS_STATUS_ALLOC_FAILED);  // the wording is cuBLAS's
  EXPECT_NE(alloc.find("alloc"), std::string::npos) << alloc;
  EXPECT_NE(alloc, api.status_string(CUBLAS_STATUS_SUCCESS));
  EXPECT_EQ(&hpc::backend::cuda::cublas_api(), &api);  // loaded once
}

}  // namespace
#else
TEST(CublasApi, LoadsOnFirstUseWithEveryEntryPoint) { GTEST_SKIP() << "a CPU-only build (CUDA=0)"; }
#endif
