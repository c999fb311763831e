// Device dispatch for the neural-network ops (same pattern as ops_core.cpp):
// CUDA tensors go to backend/cuda, the rest to backend/cpu.
#include "backend/ops_nn.h"

#include "backend/cpu/nn_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

void activation_forward(Activation act, const Tensor& x, const Tensor& y) {
  if (!on_cpu(y)) return cuda::activation_forward(act, x, y);
  cpu::activation_forward(act, x, y);
}
void activation_backward(Activation act, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx) {
  if (!on_cpu(dx)) return cuda::activation_backward(act, x, y, dy, dx);
  cpu::activation_backward(act, x, y, dy, dx);
}
void elementwise_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!on_cpu(out)) return cuda::elementwise_add(a, b, out);
  cpu::elementwise_add(a, b, out);
}

void im2col(const Tensor& x, const ConvGeometry& g, const Tensor& cols) {
  if (!on_cpu(cols)) return cuda::im2col(x, g, cols);
  cpu::im2col(x, g, cols);
}
void col2im(const Tensor& cols, const ConvGeometry& g, const Tensor& dx) {
  if (!on_cpu(dx)) return cuda::col2im(cols, g, dx);
  cpu::col2im(cols, g, dx);
}
void swap_leading_dims(const Tensor& src, const Tensor& dst, int64_t a, int64_t b, int64_t inner) {
  if (!on_cpu(dst)) return cuda::swap_leading_dims(src, dst, a, b, inner);
  cpu::swap_leading_dims(src, dst, a, b, inner);
}

void max_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y, const Tensor& argmax) {
  if (!on_cpu(y)) return cuda::max_pool_forward(x, g, y, argmax);
  cpu::max_pool_forward(x, g, y, argmax);
}
void max_pool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, const Tensor& dx) {
  if (!on_cpu(dx)) return cuda::max_pool_backward(dy, argmax, g, dx);
  cpu::max_pool_backward(dy, argmax, g, dx);
}
void avg_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y) {
  if (!on_cpu(y)) return cuda::avg_pool_forward(x, g, y);
  cpu::avg_pool_forward(x, g, y);
}
void avg_pool_backward(const Tensor& dy, const PoolGeometry& g, const Tensor& dx) {
  if (!on_cpu(dx)) return cuda::avg_pool_backward(dy, g, dx);
  cpu::avg_pool_backward(dy, g, dx);
}
void spatial_mean_forward(const Tensor& x, int64_t spatial, const Tensor& y) {
  if (!on_cpu(y)) return cuda::spatial_mean_forward(x, spatial, y);
  cpu::spatial_mean_forward(x, spatial, y);
}
void spatial_mean_backward(const Tensor& dy, int64_t spatial, const Tensor& dx) {
  if (!on_cpu(dx)) return cuda::spatial_mean_backward(dy, spatial, dx);
  cpu::spatial_mean_backward(dy, spatial, dx);
}

void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats) {
  if (!on_cpu(x)) return cuda::batchnorm_stats(x, channels, spatial, stats);
  cpu::batchnorm_stats(x, channels, spatial, stats);
}
void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var) {
  if (!on_cpu(mean))
    return cuda::batchnorm_finalize(stats, channels, eps, momentum, mean, invstd, running_mean, running_var);
  cpu::batchnorm_finalize(stats, channels, eps, momentum, mean, invstd, running_mean, running_var);
}
void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd) {
  if (!on_cpu(mean)) return cuda::batchnorm_running_inverse(running_mean, running_var, eps, mean, invstd);
  cpu::batchnorm_running_inverse(running_mean, running_var, eps, mean, invstd);
}
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, int64_t channels, int64_t spatial, const Tensor& y) {
  if (!on_cpu(y)) return cuda::batchnorm_normalize(x, mean, invstd, gamma, beta, channels, spatial, y);
  cpu::batchnorm_normalize(x, mean, invstd, gamma, beta, channels, spatial, y);
}
void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               int64_t channels, int64_t spatial, const Tensor& grad_sums,
                               const Tensor& dgamma, const Tensor& dbeta) {
  if (!on_cpu(dy))
    return cuda::batchnorm_backward_reduce(x, dy, mean, invstd, channels, spatial, grad_sums, dgamma, dbeta);
  cpu::batchnorm_backward_reduce(x, dy, mean, invstd, channels, spatial, grad_sums, dgamma, dbeta);
}
void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& stats, const Tensor& grad_sums,
                           int64_t channels, int64_t spatial, const Tensor& dx) {
  if (!on_cpu(dx))
    return cuda::batchnorm_backward_dx(x, dy, mean, invstd, gamma, stats, grad_sums, channels, spatial, dx);
  cpu::batchnorm_backward_dx(x, dy, mean, invstd, gamma, stats, grad_sums, channels, spatial, dx);
}

void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                     const Tensor& y) {
  if (!on_cpu(y)) return cuda::dropout_forward(x, p, seed, stream, index_offset, y);
  cpu::dropout_forward(x, p, seed, stream, index_offset, y);
}
void dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                      const Tensor& dx) {
  if (!on_cpu(dx)) return cuda::dropout_forward(dy, p, seed, stream, index_offset, dx);
  cpu::dropout_backward(dy, p, seed, stream, index_offset, dx);
}

ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits) {
  if (!on_cpu(logits))
    return cuda::softmax_cross_entropy(logits, labels, n_valid, label_smoothing, grad_scale, count_top5,
                                       dlogits);
  return cpu::softmax_cross_entropy(logits, labels, n_valid, label_smoothing, grad_scale, count_top5,
                                    dlogits);
}
double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy) {
  if (!on_cpu(y)) return cuda::squared_error(y, target, n_valid, grad_scale, dy);
  return cpu::squared_error(y, target, n_valid, grad_scale, dy);
}

}  // namespace hpc::backend
