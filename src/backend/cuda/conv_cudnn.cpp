// 2-D convolution on the GPU (ops.def's contract) with cuDNN: the plan for
// the shape comes from the cache (conv_plans.h), the workspace from the
// context's scratch (at most ConvPlans::WORKSPACE_LIMIT). Tensors cuDNN does
// not take (conv2d_supported: not 16-byte aligned) the layer lowers itself.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/conv_plans.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"

namespace hpc::backend::cuda {

namespace {

int as_int(int64_t v) {
  HPC_ASSERT(v >= 0 && v <= INT32_MAX, "convolution (CUDA): a dimension exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDNN_DATA_FLOAT;
    case DType::F64:
      return CUDNN_DATA_DOUBLE;
    case DType::BF16:
      return CUDNN_DATA_BFLOAT16;
    case DType::F16:
      return CUDNN_DATA_HALF;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("convolution (CUDA): unsupported dtype ") + dtype_name(t));
}

bool sixteen_bit(DType t) { return t == DType::BF16 || t == DType::F16; }

// The index of the algorithm to use among cuDNN's ranked suggestions, or -1.
template <typename Perf>
int choose(const std::vector<Perf>& perf, int returned, bool tensor_math_ok) {
  auto usable = [&](const Perf& p) {
    return p.status == CUDNN_STATUS_SUCCESS && p.memory <= ConvPlans::WORKSPACE_LIMIT &&
           (tensor_math_ok || p.mathType != CUDNN_TENSOR_OP_MATH);
  };
  for (int i = 0; i < returned; ++i)
    if (usable(perf[i]) && perf[i].determinism == CUDNN_DETERMINISTIC) return i;
  for (int i = 0; i < returned; ++i)
    if (usable(perf[i])) return i;
  return -1;
}

ConvolutionDescriptor conv_descriptor(const ConvKey& k) {
  ConvolutionDescriptor d = make_convolution_descriptor();
  const cudnnDataType_t compute = k.dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnCheck(cudnnSetConvolution2dDescriptor(d, as_int(k.pad), as_int(k.pad), as_int(k.stride),
                                             as_int(k.stride), 1, 1, CUDNN_CROSS_CORRELATION, compute));
  // fp32/fp64 stay exact FMA math; 16-bit may use tensor cores (and switches to each algorithm's own math
  // type).
  cudnnCheck(cudnnSetConvolutionMathType(d, sixteen_bit(k.dtype) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  return d;
}

std::unique_ptr<ConvPlan> make_plan(const ConvKey& k, cudnnHandle_t h) {
  auto p = std::make_unique<ConvPlan>();
  const cudnnDataType_t type = cudnn_type(k.dtype);
  const bool tensor_ok = sixteen_bit(k.dtype);
  p->x = make_tensor_descriptor();
  cudnnCheck(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, type, as_int(k.n), as_int(k.channels),
                                        as_int(k.height), as_int(k.width)));
  p->w = make_filter_descriptor();
  cudnnCheck(cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NCHW, as_int(k.out_channels),
                                        as_int(k.channels), as_int(k.kernel), as_int(k.kernel)));
  p->fwd_conv = conv_descriptor(k);
  p->bwd_data_conv = conv_descriptor(k);
  p->bwd_filter_conv = conv_descriptor(k);
  int n = 0, c = 0, ho = 0, wo = 0;
  cudnnCheck(cudnnGetConvolution2dForwardOutputDim(p->fwd_conv, p->x, p->w, &n, &c, &ho, &wo));
  p->y = make_tensor_descriptor();
  cudnnCheck(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, type, n, c, ho, wo));

  int max_algos = 0, returned = 0;
  {
    cudnnCheck(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_algos));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_algos));
    cudnnCheck(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->fwd_conv, p->y, max_algos, &returned,
                                                      perf.data()));
    const int i = choose(perf, returned, tensor_ok);
    p->fwd = i >= 0 ? perf[i].algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    if (i >= 0 && tensor_ok) cudnnCheck(cudnnSetConvolutionMathType(p->fwd_conv, perf[i].mathType));
    cudnnCheck(
        cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->fwd_conv, p->y, p->fwd, &p->fwd_bytes));
  }
  {
    cudnnCheck(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_algos));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_algos));
    cudnnCheck(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->bwd_data_conv, p->x, max_algos,
                                                           &returned, perf.data()));
    const int i = choose(perf, returned, tensor_ok);
    p->bwd_data = i >= 0 ? perf[i].algo : CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    if (i >= 0 && tensor_ok) cudnnCheck(cudnnSetConvolutionMathType(p->bwd_data_conv, perf[i].mathType));
    cudnnCheck(cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->bwd_data_conv, p->x,
                                                            p->bwd_data, &p->bwd_data_bytes));
  }
  {
    cudnnCheck(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_algos));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_algos));
    cudnnCheck(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->bwd_filter_conv, p->w,
                                                             max_algos, &returned, perf.data()));
    const int i = choose(perf, returned, tensor_ok);
    p->bwd_filter = i >= 0 ? perf[i].algo : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    if (i >= 0 && tensor_ok) cudnnCheck(cudnnSetConvolutionMathType(p->bwd_filter_conv, perf[i].mathType));
    cudnnCheck(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->bwd_filter_conv, p->w,
                                                              p->bwd_filter, &p->bwd_filter_bytes));
  }
  return p;
}

// cuDNN's alpha/beta: double for double data, float otherwise.
struct Scalars {
  float f[2] = {0.0f, 1.0f};
  double d[2] = {0.0, 1.0};
  const void* zero(DType t) const { return t == DType::F64 ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* one(DType t) const { return t == DType::F64 ? static_cast<const void*>(&d[1]) : &f[1]; }
};

ConvKey key_of(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g) {
  HPC_ASSERT(x.count() % g.sample_in_count() == 0 && weight.count() % g.col_rows() == 0,
             "convolution (CUDA): shapes");
  return {x.dtype(), x.count() / g.sample_in_count(), g.channels, g.height,
          g.width,   weight.count() / g.col_rows(),   g.kernel,   g.stride,
          g.pad};
}

void check_output(const Tensor& y, const ConvKey& k, const kernels::ConvShape& g, const char* what) {
  HPC_ASSERT(y.count() == k.n * k.out_channels * g.out_pixels() && y.dtype() == k.dtype,
             std::string("convolution (CUDA): ") + what + " is " + y.shape().str());
}

}  // namespace

// Parameters are views into the flat buffer, so a layer with an odd-sized
// neighbour can start anywhere; cuDNN wants every pointer 16-byte aligned.
bool conv2d_supported(const Tensor& x, const Tensor& weight, const Tensor& y, const kernels::ConvShape&) {
  for (const Tensor* t : {&x, &weight, &y})
    if (reinterpret_cast<uintptr_t>(t->raw()) % 16 != 0) return false;
  return true;
}

const ConvPlan& ConvPlans::get(const ConvKey& key, cudnnHandle_t handle) {
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(key, handle)).first;
  return *it->second;
}

void conv2d_forward(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g, const Tensor& y) {
  require_device("conv2d_forward", {&x, &weight, &y});
  const ConvKey k = key_of(x, weight, g);
  check_output(y, k, g, "y");
  HPC_ASSERT(weight.dtype() == k.dtype, "conv2d_forward: weight dtype");
  Context& ctx = Context::get();
  cudnnHandle_t h = ctx.cudnn();
  const ConvPlan& p = ctx.conv_plans().get(k, h);
  void* ws = p.fwd_bytes > 0 ? ctx.scratch(p.fwd_bytes) : nullptr;
  const Scalars s;
  cudnnCheck(cudnnConvolutionForward(h, s.one(k.dtype), p.x, x.raw(), p.w, weight.raw(), p.fwd_conv, p.fwd,
                                     ws, p.fwd_bytes, s.zero(k.dtype), p.y, y.raw()));
}

void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const kernels::ConvShape& g,
                     const Tensor& dweight, const Tensor& dx) {
  require_device("conv2d_backward", {&x, &weight, &dy, &dweight, &dx});
  const ConvKey k = key_of(x, weight, g);
  check_output(dy, k, g, "dy");
  HPC_ASSERT(dweight.count() == weight.count() && dweight.dtype() == k.dtype, "conv2d_backward: dweight");
  Context& ctx = Context::get();
  cudnnHandle_t h = ctx.cudnn();
  const ConvPlan& p = ctx.conv_plans().get(k, h);
  const size_t ws_bytes = std::max(p.bwd_filter_bytes, dx.defined() ? p.bwd_data_bytes : size_t(0));
  void* ws = ws_bytes > 0 ? ctx.scratch(ws_bytes) : nullptr;
  const Scalars s;
  // beta = 1: the weight gradient accumulates, like every layer's (micro-steps add up).
  cudnnCheck(cudnnConvolutionBackwardFilter(h, s.one(k.dtype), p.x, x.raw(), p.y, dy.raw(), p.bwd_filter_conv,
                                            p.bwd_filter, ws, p.bwd_filter_bytes, s.one(k.dtype), p.w,
                                            dweight.raw()));
  if (!dx.defined()) return;
  HPC_ASSERT(dx.count() == x.count() && dx.dtype() == k.dtype, "conv2d_backward: dx");
  cudnnCheck(cudnnConvolutionBackwardData(h, s.one(k.dtype), p.w, weight.raw(), p.y, dy.raw(),
                                          p.bwd_data_conv, p.bwd_data, ws, p.bwd_data_bytes, s.zero(k.dtype),
                                          p.x, dx.raw()));
}

}  // namespace hpc::backend::cuda
