// Device dispatch for the neural-network ops (same pattern as ops_core.cpp):
// the CUDA backend adds its branches here when its kernels land; until then
// a CUDA tensor reaching one of these ops is a clear error, not garbage.
#include "backend/ops_nn.h"

#include "backend/cpu/nn_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

namespace {
void require_cpu(const char* op, const Tensor& t) {
  if (!on_cpu(t)) unsupported_device(op, t);
}
}  // namespace

void activation_forward(Activation act, const Tensor& x, const Tensor& y) {
  require_cpu("activation_forward", y);
  cpu::activation_forward(act, x, y);
}
void activation_backward(Activation act, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx) {
  require_cpu("activation_backward", dx);
  cpu::activation_backward(act, x, y, dy, dx);
}
void elementwise_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  require_cpu("elementwise_add", out);
  cpu::elementwise_add(a, b, out);
}

void im2col(const Tensor& x, const ConvGeometry& g, const Tensor& cols) {
  require_cpu("im2col", cols);
  cpu::im2col(x, g, cols);
}
void col2im(const Tensor& cols, const ConvGeometry& g, const Tensor& dx) {
  require_cpu("col2im", dx);
  cpu::col2im(cols, g, dx);
}
void swap_leading_dims(const Tensor& src, const Tensor& dst, int64_t a, int64_t b, int64_t inner) {
  require_cpu("swap_leading_dims", dst);
  cpu::swap_leading_dims(src, dst, a, b, inner);
}

void max_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y, const Tensor& argmax) {
  require_cpu("max_pool_forward", y);
  cpu::max_pool_forward(x, g, y, argmax);
}
void max_pool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, const Tensor& dx) {
  require_cpu("max_pool_backward", dx);
  cpu::max_pool_backward(dy, argmax, g, dx);
}
void avg_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y) {
  require_cpu("avg_pool_forward", y);
  cpu::avg_pool_forward(x, g, y);
}
void avg_pool_backward(const Tensor& dy, const PoolGeometry& g, const Tensor& dx) {
  require_cpu("avg_pool_backward", dx);
  cpu::avg_pool_backward(dy, g, dx);
}
void spatial_mean_forward(const Tensor& x, int64_t spatial, const Tensor& y) {
  require_cpu("spatial_mean_forward", y);
  cpu::spatial_mean_forward(x, spatial, y);
}
void spatial_mean_backward(const Tensor& dy, int64_t spatial, const Tensor& dx) {
  require_cpu("spatial_mean_backward", dx);
  cpu::spatial_mean_backward(dy, spatial, dx);
}

void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats) {
  require_cpu("batchnorm_stats", x);
  cpu::batchnorm_stats(x, channels, spatial, stats);
}
void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var) {
  require_cpu("batchnorm_finalize", mean);
  cpu::batchnorm_finalize(stats, channels, eps, momentum, mean, invstd, running_mean, running_var);
}
void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd) {
  require_cpu("batchnorm_running_inverse", mean);
  cpu::batchnorm_running_inverse(running_mean, running_var, eps, mean, invstd);
}
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, int64_t channels, int64_t spatial, const Tensor& y) {
  require_cpu("batchnorm_normalize", y);
  cpu::batchnorm_normalize(x, mean, invstd, gamma, beta, channels, spatial, y);
}
void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               int64_t channels, int64_t spatial, const Tensor& grad_sums,
                               const Tensor& dgamma, const Tensor& dbeta) {
  require_cpu("batchnorm_backward_reduce", dy);
  cpu::batchnorm_backward_reduce(x, dy, mean, invstd, channels, spatial, grad_sums, dgamma, dbeta);
}
void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& stats, const Tensor& grad_sums,
                           int64_t channels, int64_t spatial, const Tensor& dx) {
  require_cpu("batchnorm_backward_dx", dx);
  cpu::batchnorm_backward_dx(x, dy, mean, invstd, gamma, stats, grad_sums, channels, spatial, dx);
}

void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                     const Tensor& y) {
  require_cpu("dropout_forward", y);
  cpu::dropout_forward(x, p, seed, stream, index_offset, y);
}
void dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                      const Tensor& dx) {
  require_cpu("dropout_backward", dx);
  cpu::dropout_backward(dy, p, seed, stream, index_offset, dx);
}

ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits) {
  require_cpu("softmax_cross_entropy", logits);
  return cpu::softmax_cross_entropy(logits, labels, n_valid, label_smoothing, grad_scale, count_top5,
                                    dlogits);
}
double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy) {
  require_cpu("squared_error", y);
  return cpu::squared_error(y, target, n_valid, grad_scale, dy);
}

}  // namespace hpc::backend
