// Neural-network backend ops: activations, convolution lowering, pooling,
// batch normalisation, dropout and the losses.
//
// Like ops_core.h, every op takes tensors and dispatches on their device and
// dtype (float or double), so layers are written once. Tensors carry a batch
// dimension; ops that need the per-sample geometry take it as a struct.
// Outputs are written, not accumulated, unless the comment says "+=".
//
// Batch normalisation is split into pieces so that a layer can all-reduce
// the per-channel sums between them (SyncBatchNorm): statistics → [reduce]
// → finalize → normalize in forward; reduce → [reduce] → dx in backward.
// Those sums are always float64 tensors: E[x²] − E[x]² loses too much in
// float32, and the reduction sums them over ranks as well.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hpc::backend {

// ---- activations ---------------------------------------------------------

enum class Activation { Relu, Gelu, Tanh };  // GELU: tanh approximation (GPT-2)

void activation_forward(Activation act, const Tensor& x, const Tensor& y);
// dx = f'(x)·dy; takes both x and y = f(x) (see kernels/activation_math.h).
void activation_backward(Activation act, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx);

// out = a + b (same count and dtype; out may alias a or b).
void elementwise_add(const Tensor& a, const Tensor& b, const Tensor& out);

// ---- convolution lowering -------------------------------------------------

// One sample's input and a square kernel; NCHW layout.
struct ConvGeometry {
  int64_t channels = 0, height = 0, width = 0;
  int64_t kernel = 1, stride = 1, pad = 0;

  int64_t out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
  int64_t out_pixels() const { return out_height() * out_width(); }
  int64_t col_rows() const { return channels * kernel * kernel; }
  int64_t in_count() const { return channels * height * width; }
};

// x [n, C, H, W] → cols [C·k·k, n·Ho·Wo]: row (c, ki, kj), column (sample, oh, ow);
// padding reads as 0. Putting the samples side by side in one matrix lets a
// whole chunk of the batch go through ONE large GEMM.
void im2col(const Tensor& x, const ConvGeometry& g, const Tensor& cols);
// The adjoint of im2col: dx [n, C, H, W] = Σ of the columns over the pixels they came from.
// cols is scratch to it: the entries that stand for padding may be overwritten with 0.
void col2im(const Tensor& cols, const ConvGeometry& g, const Tensor& dx);
// dst [b, a, inner] = src [a, b, inner]: turns a GEMM result [OC, n·P] into NCHW and back.
void swap_leading_dims(const Tensor& src, const Tensor& dst, int64_t a, int64_t b, int64_t inner);

// ---- pooling ----------------------------------------------------------------

// Square windows without padding over one sample's C×H×W.
struct PoolGeometry {
  int64_t channels = 0, height = 0, width = 0;
  int64_t kernel = 2, stride = 2;

  int64_t out_height() const { return (height - kernel) / stride + 1; }
  int64_t out_width() const { return (width - kernel) / stride + 1; }
};

// argmax (I32, same shape as y) records the winner's index within its H×W plane.
void max_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y, const Tensor& argmax);
void max_pool_backward(const Tensor& dy, const Tensor& argmax, const PoolGeometry& g, const Tensor& dx);
void avg_pool_forward(const Tensor& x, const PoolGeometry& g, const Tensor& y);
void avg_pool_backward(const Tensor& dy, const PoolGeometry& g, const Tensor& dx);
// y[r] = mean of x[r, 0:spatial] (global average pooling over rows = N·C).
void spatial_mean_forward(const Tensor& x, int64_t spatial, const Tensor& y);
void spatial_mean_backward(const Tensor& dy, int64_t spatial, const Tensor& dx);

// ---- batch normalisation ------------------------------------------------------
// x is [N, C, spatial] (spatial = 1 for BatchNorm1d); mean, invstd, gamma,
// beta, running_* are [C] in the layer's dtype.

// stats (F64, 2C+1) = [Σx per channel | Σx² per channel | elements per channel].
void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats);
// From (all-reduced) stats: mean and invstd = 1/√(var + eps) with the biased
// batch variance; when running_mean is defined, also running ← (1 − momentum)·running
// + momentum·batch, with the unbiased variance for running_var (PyTorch).
void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var);
// Evaluation: mean = running_mean, invstd = 1/√(running_var + eps).
void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd);
// y = gamma·(x − mean)·invstd + beta.
void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, int64_t channels, int64_t spatial, const Tensor& y);
// grad_sums (F64, 2C) = [Σdy | Σdy·x̂] per channel with x̂ = (x − mean)·invstd,
// and dgamma += Σdy·x̂, dbeta += Σdy (the local, un-reduced sums).
void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               int64_t channels, int64_t spatial, const Tensor& grad_sums,
                               const Tensor& dgamma, const Tensor& dbeta);
// Batch statistics (grad_sums defined): dx = gamma·invstd·(dy − (Σdy + x̂·Σdy·x̂)/M),
// M = stats[2C], the (all-reduced) element count. Running statistics (grad_sums
// undefined): dx = gamma·invstd·dy, since mean and invstd are constants then.
void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& stats, const Tensor& grad_sums,
                           int64_t channels, int64_t spatial, const Tensor& dx);

// ---- dropout ----------------------------------------------------------------

// Element i is kept when random_uniform(seed, stream, index_offset + i) ≥ p
// and then scaled by 1/(1 − p) (inverted dropout). The mask is never stored:
// backward recomputes it from the same (seed, stream, offset).
void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                     const Tensor& y);
void dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t stream, uint64_t index_offset,
                      const Tensor& dx);

// ---- losses -------------------------------------------------------------------

struct ClassifyStats {
  double loss_sum = 0;
  int64_t correct1 = 0;
  int64_t correct5 = 0;
};

// Softmax cross-entropy of logits [N, K] against labels (I32 [N]) over the
// first n_valid rows. dlogits (when defined) gets grad_scale·(softmax − target)
// on valid rows and 0 on the others. Top-5 is counted only when count_top5.
// Throws UserError for a label outside [0, K).
ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits);
// Σ over the first n_valid rows of Σ_k (y − t)²; dy (when defined) = grad_scale·2·(y − t), 0 on other rows.
double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy);

}  // namespace hpc::backend
