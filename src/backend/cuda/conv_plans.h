// cuDNN convolution plans: for each convolution shape, the descriptors and
// the algorithms of forward, backward-data and backward-filter, chosen ONCE
// (on the first call with that shape) and cached for the rest of the run.
//
// Choice: cuDNN's heuristics (cudnnGet*Algorithm_v7, what PyTorch does
// unless cudnn.benchmark is set), keeping the first algorithm that
//   - needs at most WORKSPACE_LIMIT bytes of workspace (the bound), and
//   - keeps fp32 in fp32 (no TF32 tensor-core math: fp32 means the same on
//     the CPU and the GPU), and
//   - is deterministic, when such an algorithm passes the other two tests
//     (reruns then give the same bits; cuDNN's deterministic choices are
//     rarely the slower ones);
// falling back to the implicit-GEMM algorithms, which need no workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "backend/cuda/raii.h"
#include "core/tensor.h"

namespace hpc::backend::cuda {

struct ConvKey {
  DType dtype;
  int64_t n, channels, height, width, out_channels, kernel, stride, pad;
  bool operator==(const ConvKey&) const = default;
};

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    size_t h = static_cast<size_t>(k.dtype);
    for (int64_t v : {k.n, k.channels, k.height, k.width, k.out_channels, k.kernel, k.stride, k.pad})
      h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};

struct ConvPlan {
  TensorDescriptor x, y;
  FilterDescriptor w;
  // One convolution descriptor per direction: each carries the math type its algorithm was chosen with.
  ConvolutionDescriptor fwd_conv, bwd_data_conv, bwd_filter_conv;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

class ConvPlans {
 public:
  static constexpr size_t WORKSPACE_LIMIT = size_t(256) << 20;

  // The plan for key, made on first use.
  const ConvPlan& get(const ConvKey& key, cudnnHandle_t handle);
  size_t size() const { return plans_.size(); }

 private:
  std::unordered_map<ConvKey, std::unique_ptr<ConvPlan>, ConvKeyHash> plans_;
};

}  // namespace hpc::backend::cuda
