// CUDA neural-network ops (ops.def): shape checks, then one launcher of
// kernels/ on the compute stream. The losses wait for their totals, which
// they return to the host (a rank's loss and hit counts), like the CPU ops.
#include <algorithm>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/batchnorm.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/loss.cuh"
#include "kernels/lowering.cuh"
#include "kernels/reduce.cuh"

namespace hpc::backend::cuda {

namespace {

cudaStream_t stream() { return Context::get().compute(); }

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  HPC_ASSERT(a.count() == b.count() && a.dtype() == b.dtype(),
             std::string(op) + ": " + a.shape().str() + " vs " + b.shape().str());
}

int64_t rows_of(const Tensor& x, int64_t channels, int64_t spatial) {
  HPC_ASSERT(channels > 0 && spatial > 0 && x.count() % (channels * spatial) == 0, "batchnorm: shapes");
  return x.count() / (channels * spatial);
}

// The statistics dtype that goes with activations of dtype t (kernels::compute_t).
DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

void check_stats(const Tensor& t, DType activations, const char* op) {
  HPC_ASSERT(!t.defined() || t.dtype() == stats_dtype(activations),
             std::string(op) + ": batch-norm statistics must be " + dtype_name(stats_dtype(activations)) +
                 " for " + dtype_name(activations) + " activations");
}

double* scratch_doubles(int64_t count) {
  return static_cast<double*>(
      Context::get().scratch(sizeof(double) * static_cast<size_t>(count > 0 ? count : 1)));
}

}  // namespace

// ---- activations -------------------------------------------------------------------

void activation_forward(kernels::ActivationKind act, const Tensor& x, const Tensor& y) {
  require_device("activation_forward", {&x, &y});
  check_same(x, y, "activation_forward");
  dispatch_storage(y.dtype(), "activation_forward", [&]<typename T>() {
    kernels::activation_forward(act, x.data<T>(), y.data<T>(), y.count(), stream());
  });
}

void activation_backward(kernels::ActivationKind act, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx) {
  // tanh differentiates at y (activation_math.h).
  const Tensor& in = act == kernels::ActivationKind::Tanh ? y : x;
  require_device("activation_backward", {&in, &dy, &dx});
  check_same(dy, dx, "activation_backward");
  check_same(in, dx, "activation_backward");
  dispatch_storage(dx.dtype(), "activation_backward", [&]<typename T>() {
    kernels::activation_backward(act, in.data<T>(), dy.data<T>(), dx.data<T>(), dx.count(), stream());
  });
}

void elementwise_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  require_device("elementwise_add", {&a, &b, &out});
  check_same(a, out, "elementwise_add");
  check_same(b, out, "elementwise_add");
  dispatch_storage(out.dtype(), "elementwise_add", [&]<typename T>() {
    kernels::add(a.data<T>(), b.data<T>(), out.data<T>(), out.count(), stream());
  });
}

// backend::fuses_relu is false on the GPU: no layer folds a relu there, so nothing calls this.
void add_relu(const Tensor& a, const Tensor& b, const Tensor& out) {
  require_device("add_relu", {&a, &b, &out});
  throw Error(EXIT_INTERNAL, "add_relu: no GPU kernel (backend::fuses_relu is false on the GPU)");
}

// ---- convolution lowering -------------------------------------------------------------

void im2col(const Tensor& x, const kernels::ConvShape& g, const Tensor& cols) {
  require_device("im2col", {&x, &cols});
  HPC_ASSERT(x.count() % g.sample_in_count() == 0, "im2col: input is not whole samples");
  const kernels::ConvShape s = g.with_n(x.count() / g.sample_in_count());
  HPC_ASSERT(cols.count() >= s.col_count() && cols.dtype() == x.dtype(), "im2col: column buffer too small");
  dispatch_storage(x.dtype(), "im2col",
                   [&]<typename T>() { kernels::im2col(x.data<T>(), cols.data<T>(), s, stream()); });
}

void col2im(const Tensor& cols, const kernels::ConvShape& g, const Tensor& dx) {
  require_device("col2im", {&cols, &dx});
  HPC_ASSERT(dx.count() % g.sample_in_count() == 0, "col2im: output is not whole samples");
  const kernels::ConvShape s = g.with_n(dx.count() / g.sample_in_count());
  HPC_ASSERT(cols.count() >= s.col_count() && cols.dtype() == dx.dtype(), "col2im: column buffer too small");
  dispatch_storage(dx.dtype(), "col2im",
                   [&]<typename T>() { kernels::col2im(cols.data<T>(), dx.data<T>(), s, stream()); });
}

void swap_leading_dims(const Tensor& src, const Tensor& dst, int64_t a, int64_t b, int64_t inner) {
  require_device("swap_leading_dims", {&src, &dst});
  HPC_ASSERT(src.count() >= a * b * inner && dst.count() >= a * b * inner && src.dtype() == dst.dtype(),
             "swap_leading_dims: shapes");
  HPC_ASSERT(src.raw() != dst.raw(), "swap_leading_dims: in place");
  dispatch_storage(dst.dtype(), "swap_leading_dims", [&]<typename T>() {
    kernels::swap_leading_dims(src.data<T>(), dst.data<T>(), a, b, inner, stream());
  });
}

// ---- pooling -----------------------------------------------------------------------------

void max_pool_forward(const Tensor& x, const kernels::PoolShape& g, const Tensor& y, const Tensor& argmax) {
  require_device("max_pool_forward", {&x, &y, &argmax});
  const kernels::PoolShape s = g.with_planes(x.count() / g.in_pixels());
  HPC_ASSERT(
      y.count() == s.planes * s.out_pixels() && argmax.count() == y.count() && argmax.dtype() == DType::I32,
      "max_pool_forward: shapes");
  dispatch_storage(y.dtype(), "max_pool_forward", [&]<typename T>() {
    kernels::max_pool_forward(x.data<T>(), y.data<T>(), argmax.data<int32_t>(), s, stream());
  });
}

void max_pool_backward(const Tensor& dy, const Tensor& argmax, const kernels::PoolShape& g,
                       const Tensor& dx) {
  require_device("max_pool_backward", {&dy, &argmax, &dx});
  const kernels::PoolShape s = g.with_planes(dx.count() / g.in_pixels());
  HPC_ASSERT(dy.count() == s.planes * s.out_pixels() && argmax.count() == dy.count(),
             "max_pool_backward: shapes");
  dispatch_storage(dx.dtype(), "max_pool_backward", [&]<typename T>() {
    kernels::max_pool_backward(dy.data<T>(), argmax.data<int32_t>(), dx.data<T>(), s, stream());
  });
}

void avg_pool_forward(const Tensor& x, const kernels::PoolShape& g, const Tensor& y) {
  require_device("avg_pool_forward", {&x, &y});
  const kernels::PoolShape s = g.with_planes(x.count() / g.in_pixels());
  HPC_ASSERT(y.count() == s.planes * s.out_pixels(), "avg_pool_forward: shapes");
  dispatch_storage(y.dtype(), "avg_pool_forward",
                   [&]<typename T>() { kernels::avg_pool_forward(x.data<T>(), y.data<T>(), s, stream()); });
}

void avg_pool_backward(const Tensor& dy, const kernels::PoolShape& g, const Tensor& dx) {
  require_device("avg_pool_backward", {&dy, &dx});
  const kernels::PoolShape s = g.with_planes(dx.count() / g.in_pixels());
  HPC_ASSERT(dy.count() == s.planes * s.out_pixels(), "avg_pool_backward: shapes");
  dispatch_storage(dx.dtype(), "avg_pool_backward", [&]<typename T>() {
    kernels::avg_pool_backward(dy.data<T>(), dx.data<T>(), s, stream());
  });
}

void spatial_mean_forward(const Tensor& x, int64_t spatial, const Tensor& y) {
  require_device("spatial_mean_forward", {&x, &y});
  HPC_ASSERT(x.count() == y.count() * spatial, "spatial_mean_forward: shapes");
  dispatch_storage(y.dtype(), "spatial_mean_forward", [&]<typename T>() {
    kernels::spatial_mean_forward(x.data<T>(), y.data<T>(), y.count(), spatial, stream());
  });
}

void spatial_mean_backward(const Tensor& dy, int64_t spatial, const Tensor& dx) {
  require_device("spatial_mean_backward", {&dy, &dx});
  HPC_ASSERT(dx.count() == dy.count() * spatial, "spatial_mean_backward: shapes");
  dispatch_storage(dx.dtype(), "spatial_mean_backward", [&]<typename T>() {
    kernels::spatial_mean_backward(dy.data<T>(), dx.data<T>(), dy.count(), spatial, stream());
  });
}

// ---- batch normalisation -------------------------------------------------------------------

void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats) {
  require_device("batchnorm_stats", {&x, &stats});
  const int64_t rows = rows_of(x, channels, spatial);
  HPC_ASSERT(stats.dtype() == DType::F64 && stats.count() == 2 * channels + 1,
             "batchnorm_stats: sums must be F64");
  double* partials = scratch_doubles(kernels::channel_partials(rows, channels, spatial, 2));
  dispatch_storage(x.dtype(), "batchnorm_stats", [&]<typename T>() {
    kernels::bn_stats(x.data<T>(), rows, channels, spatial, stats.data<double>(), partials, stream());
  });
}

void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var) {
  require_device("batchnorm_finalize", {&stats, &mean, &invstd, &running_mean, &running_var});
  HPC_ASSERT(stats.dtype() == DType::F64 && stats.count() == 2 * channels + 1,
             "batchnorm_finalize: sums must be F64");
  HPC_ASSERT(mean.dtype() == DType::F32 || mean.dtype() == DType::F64,
             "batchnorm_finalize: statistics dtype");
  dispatch_storage(mean.dtype(), "batchnorm_finalize", [&]<typename S>() {
    if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>)
      kernels::bn_finalize(stats.data<double>(), channels, eps, momentum, ptr<S>(mean, "batchnorm_finalize"),
                           ptr<S>(invstd, "batchnorm_finalize"), ptr<S>(running_mean, "batchnorm_finalize"),
                           ptr<S>(running_var, "batchnorm_finalize"), stream());
  });
}

void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd) {
  require_device("batchnorm_running_inverse", {&running_mean, &running_var, &mean, &invstd});
  HPC_ASSERT(mean.dtype() == DType::F32 || mean.dtype() == DType::F64, "batchnorm_running_inverse: dtype");
  dispatch_storage(mean.dtype(), "batchnorm_running_inverse", [&]<typename S>() {
    if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>)
      kernels::bn_running_inverse(ptr<S>(running_mean, "bn"), ptr<S>(running_var, "bn"), mean.count(), eps,
                                  ptr<S>(mean, "bn"), ptr<S>(invstd, "bn"), stream());
  });
}

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, bool relu, int64_t channels, int64_t spatial, const Tensor& y) {
  require_device("batchnorm_normalize", {&x, &mean, &invstd, &gamma, &beta, &y});
  HPC_ASSERT(!relu, "batchnorm_normalize: no fused relu on the GPU (backend::fuses_relu)");
  const int64_t rows = rows_of(x, channels, spatial);
  HPC_ASSERT(y.count() == x.count(), "batchnorm_normalize: shapes");
  check_stats(mean, y.dtype(), "batchnorm_normalize");
  dispatch_storage(y.dtype(), "batchnorm_normalize", [&]<typename T>() {
    using S = kernels::compute_t<T>;
    kernels::bn_normalize(x.data<T>(), mean.data<S>(), invstd.data<S>(), ptr<T>(gamma, "bn"),
                          ptr<T>(beta, "bn"), y.data<T>(), rows, channels, spatial, stream());
  });
}

void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               const Tensor& gamma, const Tensor& beta, bool relu, int64_t channels,
                               int64_t spatial, const Tensor& grad_sums, const Tensor& dgamma,
                               const Tensor& dbeta) {
  require_device("batchnorm_backward_reduce", {&x, &dy, &mean, &invstd, &grad_sums, &dgamma, &dbeta});
  (void)gamma;
  (void)beta;
  HPC_ASSERT(!relu, "batchnorm_backward_reduce: no fused relu on the GPU (backend::fuses_relu)");
  const int64_t rows = rows_of(x, channels, spatial);
  HPC_ASSERT(grad_sums.dtype() == DType::F64 && grad_sums.count() == 2 * channels,
             "batchnorm_backward_reduce: sums must be F64");
  check_stats(mean, dy.dtype(), "batchnorm_backward_reduce");
  double* partials = scratch_doubles(kernels::channel_partials(rows, channels, spatial, 2));
  dispatch_storage(dy.dtype(), "batchnorm_backward_reduce", [&]<typename T>() {
    using S = kernels::compute_t<T>;
    kernels::bn_backward_reduce(x.data<T>(), dy.data<T>(), mean.data<S>(), invstd.data<S>(), rows, channels,
                                spatial, grad_sums.data<double>(), ptr<T>(dgamma, "bn"), ptr<T>(dbeta, "bn"),
                                partials, stream());
  });
}

void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& beta, bool relu, const Tensor& stats,
                           const Tensor& grad_sums, int64_t channels, int64_t spatial, const Tensor& dx) {
  require_device("batchnorm_backward_dx", {&x, &dy, &mean, &invstd, &gamma, &stats, &grad_sums, &dx});
  (void)beta;
  HPC_ASSERT(!relu, "batchnorm_backward_dx: no fused relu on the GPU (backend::fuses_relu)");
  const int64_t rows = rows_of(x, channels, spatial);
  const bool batch_stats = grad_sums.defined();
  if (batch_stats)
    HPC_ASSERT(stats.dtype() == DType::F64 && stats.count() == 2 * channels + 1 &&
                   grad_sums.dtype() == DType::F64 && grad_sums.count() == 2 * channels,
               "batchnorm_backward_dx: sums must be F64");
  check_stats(mean, dx.dtype(), "batchnorm_backward_dx");
  dispatch_storage(dx.dtype(), "batchnorm_backward_dx", [&]<typename T>() {
    using S = kernels::compute_t<T>;
    S* coeffs = static_cast<S*>(Context::get().scratch(sizeof(S) * static_cast<size_t>(3 * channels)));
    kernels::bn_backward_dx(x.data<T>(), dy.data<T>(), mean.data<S>(), invstd.data<S>(), ptr<T>(gamma, "bn"),
                            batch_stats ? stats.data<double>() : nullptr,
                            batch_stats ? grad_sums.data<double>() : nullptr, rows, channels, spatial,
                            dx.data<T>(), coeffs, stream());
  });
}

// ---- dropout ---------------------------------------------------------------------------

namespace {

// y = mask·x/(1 − p) with the mask of (seed, stream_id, index_offset): forward and backward alike.
void apply_dropout(const char* op, const Tensor& x, double p, uint64_t seed, uint64_t stream_id,
                   uint64_t index_offset, const Tensor& y) {
  require_device(op, {&x, &y});
  check_same(x, y, op);
  HPC_ASSERT(p >= 0 && p < 1, "dropout: p outside [0, 1)");
  dispatch_storage(y.dtype(), op, [&]<typename T>() {
    kernels::dropout(x.data<T>(), y.data<T>(), y.count(), p, seed, stream_id, index_offset, stream());
  });
}

}  // namespace

void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t stream_id, uint64_t index_offset,
                     const Tensor& y) {
  apply_dropout("dropout_forward", x, p, seed, stream_id, index_offset, y);
}

// The same mask and factor as forward: the op is linear.
void dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t stream_id, uint64_t index_offset,
                      const Tensor& dx) {
  apply_dropout("dropout_backward", dy, p, seed, stream_id, index_offset, dx);
}

// ---- losses ------------------------------------------------------------------------------

namespace {

// Rows past n_valid are padding: their gradient is 0, so the caller never clears them.
void zero_rows(const Tensor& t, int64_t from, int64_t width) {
  if (!t.defined()) return;
  const int64_t rows = t.count() / width;
  if (from >= rows) return;
  const size_t row_bytes = static_cast<size_t>(width) * dtype_size(t.dtype());
  cudaCheck(cudaMemsetAsync(static_cast<char*>(t.raw()) + from * row_bytes, 0, (rows - from) * row_bytes,
                            stream()));
}

[[noreturn]] void throw_bad_label(const Tensor& labels, int64_t n_valid, int64_t k) {
  std::vector<int32_t> host(static_cast<size_t>(n_valid));
  cudaCheck(cudaMemcpy(host.data(), labels.raw(), host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n_valid; ++i)
    if (host[i] < 0 || host[i] >= k)
      throw UserError("label " + std::to_string(host[i]) + " of sample " + std::to_string(i) +
                      " is outside the model's " + std::to_string(k) + " classes [0, " + std::to_string(k) +
                      ")");
  HPC_ASSERT(false, "cross-entropy (CUDA): a bad label was reported but none is out of range");
}

}  // namespace

ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits) {
  require_device("softmax_cross_entropy", {&logits, &labels, &dlogits});
  const int64_t n = logits.shape()[0], k = logits.count() / n;
  HPC_ASSERT(labels.dtype() == DType::I32 && labels.count() >= n_valid && n_valid <= n,
             "cross-entropy: shapes");
  HPC_ASSERT(!dlogits.defined() || (dlogits.count() == logits.count() && dlogits.dtype() == logits.dtype()),
             "cross-entropy: dlogits shape");
  const int64_t rows = std::max<int64_t>(n_valid, 0);
  // Scratch: per-row losses (double), 4 totals (double), per-row ranks (int32).
  Context& ctx = Context::get();
  auto* row_loss = static_cast<double*>(ctx.scratch(sizeof(double) * static_cast<size_t>(rows + 4) +
                                                    sizeof(int32_t) * static_cast<size_t>(rows)));
  double* totals = row_loss + rows;
  auto* row_rank = reinterpret_cast<int32_t*>(totals + 4);
  dispatch_storage(logits.dtype(), "softmax_cross_entropy", [&]<typename T>() {
    kernels::softmax_cross_entropy(logits.data<T>(), labels.data<int32_t>(), rows, k, label_smoothing,
                                   grad_scale, count_top5, ptr<T>(dlogits, "cross-entropy"), row_loss,
                                   row_rank, totals, stream());
  });
  zero_rows(dlogits, rows, k);
  const auto* t = static_cast<const double*>(ctx.read_back(totals, 4 * sizeof(double)));
  ClassifyStats st{t[0], static_cast<int64_t>(t[1]), static_cast<int64_t>(t[2])};
  if (t[3] > 0) throw_bad_label(labels, rows, k);
  return st;
}

double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy) {
  require_device("squared_error", {&y, &target, &dy});
  const int64_t n = y.shape()[0], k = y.count() / n;
  HPC_ASSERT(target.dtype() == y.dtype() && target.count() == y.count() && n_valid <= n, "mse: shapes");
  HPC_ASSERT(!dy.defined() || (dy.count() == y.count() && dy.dtype() == y.dtype()), "mse: dy shape");
  const int64_t rows = std::max<int64_t>(n_valid, 0);
  const int64_t parts = kernels::sum_partials(rows);
  double* row_loss = scratch_doubles(rows + parts + 1);
  double* partials = row_loss + rows;
  double* total = partials + parts;
  dispatch_storage(y.dtype(), "squared_error", [&]<typename T>() {
    kernels::squared_error(y.data<T>(), target.data<T>(), rows, k, grad_scale, ptr<T>(dy, "mse"), row_loss,
                           stream());
  });
  kernels::reduce_sum(row_loss, rows, false, partials, total, stream());
  zero_rows(dy, rows, k);
  return *static_cast<const double*>(Context::get().read_back(total, sizeof(double)));
}

}  // namespace hpc::backend::cuda
