// CPU implementations of the neural-network ops (ops_nn.h). Same contracts.
// Split by family: nn_ops.cpp (activations, dropout, pooling),
// conv_ops.cpp (im2col/col2im), norm_ops.cpp (batch norm), loss_ops.cpp.
#pragma once

#include "backend/ops_nn.h"

namespace hpc::backend::cpu {

void activation_forward(Activation act, const Tensor& x, const Tensor& y);
void activation_backward(Activation act, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx);
void elementwise_add(const Tensor& a, const Tensor& b, const Tensor& out);

void im2col(const Tensor& x, const ConvGeometry& g, const Tensor& cols);
void col2im(const Tensor& cols, const ConvGeometry& g, const Tensor& dx);
void swap_leading_dims(const Tensor& src, const Tensor& dst, int64_t a, int64_t b, int64_t inner);

void max_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y, const Tensor& argmax);
void max_pool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, const Tensor& dx);
void avg_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y);
void avg_pool_backward(const Tensor& dy, const PoolGeometry& g, const Tensor& dx);
void spatial_mean_forward(const Tensor& x, int64_t spatial, const Tensor& y);
void spatial_mean_backward(const Tensor& dy, int64_t spatial, const Tensor& dx);

void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats);
void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var);
void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd);
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, int64_t channels, int64_t spatial, const Tensor& y);
void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               int64_t channels, int64_t spatial, const Tensor& grad_sums,
                               const Tensor& dgamma, const Tensor& dbeta);
void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& stats, const Tensor& grad_sums,
                           int64_t channels, int64_t spatial, const Tensor& dx);

void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                     const Tensor& y);
void dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                      const Tensor& dx);

ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits);
double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy);

}  // namespace hpc::backend::cpu
