// The CUDA backend's ops: the same contracts as the public headers
// (ops_core.h, ops_nn.h, ops_conv.h, ops_optim.h, ops_amp.h), for tensors on
// the GPU. The dispatch files call these when a tensor's device is CUDA; a
// CPU-only build links the stubs of backend/nocuda/cuda_ops.cpp instead.
//
// Every op runs on the context's compute stream (context.h) and returns
// without waiting for the GPU, except those that return a number to the
// host (sum, sum_squares, the losses, the non-finite counts), which wait for
// that number. Tensors of float32, float64, bfloat16 and float16 are
// accepted (16-bit ones computing in float).
//
// Plain C++: no CUDA types here, so the dispatch files need no CUDA headers.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "backend/ops_conv.h"
#include "backend/ops_core.h"
#include "backend/ops_nn.h"
#include "backend/ops_optim.h"

namespace hpc::backend::cuda {

// ---- core ----------------------------------------------------------------------
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
          const Tensor& b, double beta, const Tensor& c);
void fill(const Tensor& t, double value);
// Any direction: host→device, device→host, device→device.
void copy(const Tensor& src, const Tensor& dst);
void copy_async(const Tensor& host_src, const Tensor& dst);
void convert(const Tensor& src, const Tensor& dst);
void axpy(double alpha, const Tensor& x, const Tensor& y);
void scale(const Tensor& x, double alpha);
double sum_squares(const Tensor& x);
double sum(const Tensor& x);
void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial);
void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial);

// ---- nn ------------------------------------------------------------------------
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
ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits);
double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy);

// ---- convolution (cuDNN) ----------------------------------------------------------
// Whether cuDNN takes these tensors: every pointer 16-byte aligned. Parameters
// are views into the flat buffer, so a layer with an odd-sized neighbour can
// start anywhere; such a convolution runs as im2col + cuBLAS instead.
bool cudnn_aligned(std::initializer_list<const Tensor*> tensors);
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeometry& g,
                    const Tensor& y);
void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const ConvGeometry& g,
                     const Tensor& dweight, const Tensor& dbias, const Tensor& dx);

// ---- optimizer and mixed precision ---------------------------------------------------
void optim_update(const OptimHyper& hyper, bool decay, const Tensor& params, const Tensor& grads,
                  const Tensor& state_a, const Tensor& state_b, int64_t offset, int64_t count);
int64_t unscale_grads(const Tensor& grads, const Tensor& out, double inv_scale);
int64_t count_nonfinite(const Tensor& x);

// ---- transformer (ops_transformer.h; transformer_ops.cpp) ----------------------------
// Token ids may be any float dtype or int32. embedding_forward waits for the
// GPU once (its id check); attention_backward uses the context's scratch, not `scratch`.
void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y);
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe);
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta);
void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out);
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        const Tensor& dqkv, const Tensor& scratch);

}  // namespace hpc::backend::cuda
