// The CPU-only build's stand-ins for backend/cuda/cuda_ops.h (Caffe's
// "CPU_ONLY stubs"): the dispatch files call them for CUDA tensors, which a
// build without CUDA can never create (device_alloc refuses), so reaching
// one is an internal error.
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace hpc::backend::cuda {

namespace {
[[noreturn]] void unavailable(const char* op) {
  throw Error(EXIT_INTERNAL, std::string(op) + ": a CUDA tensor in a build without CUDA");
}
}  // namespace

void gemm(bool, bool, int64_t, int64_t, int64_t, double, const Tensor&, const Tensor&, double,
          const Tensor&) {
  unavailable("gemm");
}
void fill(const Tensor&, double) { unavailable("fill"); }
void copy(const Tensor&, const Tensor&) { unavailable("copy"); }
void copy_async(const Tensor&, const Tensor&) { unavailable("copy_async"); }
void convert(const Tensor&, const Tensor&) { unavailable("convert"); }
void axpy(double, const Tensor&, const Tensor&) { unavailable("axpy"); }
void scale(const Tensor&, double) { unavailable("scale"); }
double sum_squares(const Tensor&) { unavailable("sum_squares"); }
double sum(const Tensor&) { unavailable("sum"); }
void add_bias(const Tensor&, const Tensor&, int64_t, int64_t) { unavailable("add_bias"); }
void bias_grad(const Tensor&, const Tensor&, int64_t, int64_t) { unavailable("bias_grad"); }

void activation_forward(Activation, const Tensor&, const Tensor&) { unavailable("activation_forward"); }
void activation_backward(Activation, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unavailable("activation_backward");
}
void elementwise_add(const Tensor&, const Tensor&, const Tensor&) { unavailable("elementwise_add"); }
void im2col(const Tensor&, const ConvGeometry&, const Tensor&) { unavailable("im2col"); }
void col2im(const Tensor&, const ConvGeometry&, const Tensor&) { unavailable("col2im"); }
void swap_leading_dims(const Tensor&, const Tensor&, int64_t, int64_t, int64_t) {
  unavailable("swap_leading_dims");
}
void max_pool_forward(const Tensor&, const PoolGeometry&, const Tensor&, const Tensor&) {
  unavailable("max_pool_forward");
}
void max_pool_backward(const Tensor&, const Tensor&, const PoolGeometry&, const Tensor&) {
  unavailable("max_pool_backward");
}
void avg_pool_forward(const Tensor&, const PoolGeometry&, const Tensor&) { unavailable("avg_pool_forward"); }
void avg_pool_backward(const Tensor&, const PoolGeometry&, const Tensor&) {
  unavailable("avg_pool_backward");
}
void spatial_mean_forward(const Tensor&, int64_t, const Tensor&) { unavailable("spatial_mean_forward"); }
void spatial_mean_backward(const Tensor&, int64_t, const Tensor&) { unavailable("spatial_mean_backward"); }
void batchnorm_stats(const Tensor&, int64_t, int64_t, const Tensor&) { unavailable("batchnorm_stats"); }
void batchnorm_finalize(const Tensor&, int64_t, double, double, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&) {
  unavailable("batchnorm_finalize");
}
void batchnorm_running_inverse(const Tensor&, const Tensor&, double, const Tensor&, const Tensor&) {
  unavailable("batchnorm_running_inverse");
}
void batchnorm_normalize(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                         int64_t, const Tensor&) {
  unavailable("batchnorm_normalize");
}
void batchnorm_backward_reduce(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                               const Tensor&, const Tensor&, const Tensor&) {
  unavailable("batchnorm_backward_reduce");
}
void batchnorm_backward_dx(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, int64_t, int64_t, const Tensor&) {
  unavailable("batchnorm_backward_dx");
}
void dropout_forward(const Tensor&, double, uint64_t, uint64_t, uint64_t, const Tensor&) {
  unavailable("dropout_forward");
}
ClassifyStats softmax_cross_entropy(const Tensor&, const Tensor&, int64_t, double, double, bool,
                                    const Tensor&) {
  unavailable("softmax_cross_entropy");
}
double squared_error(const Tensor&, const Tensor&, int64_t, double, const Tensor&) {
  unavailable("squared_error");
}

bool cudnn_aligned(std::initializer_list<const Tensor*>) { unavailable("cudnn_aligned"); }
void conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&, const Tensor&) {
  unavailable("conv2d_forward");
}
void conv2d_backward(const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&, const Tensor&,
                     const Tensor&, const Tensor&) {
  unavailable("conv2d_backward");
}

void optim_update(const OptimHyper&, bool, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  int64_t, int64_t) {
  unavailable("optim_update");
}
int64_t unscale_grads(const Tensor&, const Tensor&, double) { unavailable("unscale_grads"); }
int64_t count_nonfinite(const Tensor&) { unavailable("count_nonfinite"); }

void embedding_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unavailable("embedding_forward");
}
void embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unavailable("embedding_backward");
}
void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                       const Tensor&) {
  unavailable("layernorm_forward");
}
void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, bool, const Tensor&, const Tensor&) {
  unavailable("layernorm_backward");
}
void attention_forward(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  unavailable("attention_forward");
}
void attention_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, const Tensor&, const Tensor&) {
  unavailable("attention_backward");
}

}  // namespace hpc::backend::cuda
