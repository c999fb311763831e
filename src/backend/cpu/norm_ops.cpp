// CPU batch normalisation (Ioffe & Szegedy 2015), in the pieces ops.def
// describes so that SyncBatchNorm can all-reduce between them.
//
// Sums are accumulated in double per (sample, channel) row. Normalisation
// and dx fold the per-channel constants first, so the per-element loops are
// y = (x − mean)·gain + beta and dx = k1·dy + k2·(x − mean) + k3. Centring
// before scaling keeps float32 exact-ish when |mean| ≫ std. The row loops
// are the kernel table's (isa/kernel_table.h; isa/generic.h has their
// bodies and the reasons for their partial sums).
//
// Channel-blocked float32 activations (core/tensor.h, between oneDNN
// convolutions) run the table's blocked loops over positions with one
// vector of channels each.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/dispatch.h"
#include "backend/ops_impl.h"

namespace hpc::backend::cpu {

namespace {

int64_t rows_of(const Tensor& x, int64_t channels, int64_t spatial) {
  HPC_ASSERT(channels > 0 && spatial > 0 && x.count() % (channels * spatial) == 0, "batchnorm: shapes");
  return x.count() / (channels * spatial);
}

void check_sums(const Tensor& sums, int64_t count, const char* op) {
  HPC_ASSERT(sums.dtype() == DType::F64 && sums.count() == count, std::string(op) + ": sums must be F64");
}

template <typename T>
std::vector<T> gains_of(const Tensor& gamma, const Tensor& invstd, int64_t channels) {
  std::vector<T> g(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) g[size_t(c)] = gamma.data<T>()[c] * invstd.data<T>()[c];
  return g;
}

// The shape of a channel-blocked x ([N, C/B, S, B]) for the table's blocked loops.
BlockedShape blocked_shape(const Tensor& x, int64_t channels, int64_t spatial, const char* op) {
  HPC_ASSERT(x.dtype() == DType::F32, std::string(op) + ": a blocked tensor must be float32");
  const int block = x.channel_block();
  if (block != 8 && block != 16)
    throw Error(EXIT_INTERNAL, std::string(op) + ": channel block " + std::to_string(block));
  HPC_ASSERT(channels % block == 0, "batchnorm: channels not a multiple of the block");
  return {rows_of(x, channels, spatial), channels / block, spatial, block};
}

}  // namespace

void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats) {
  const int64_t n = rows_of(x, channels, spatial);
  check_sums(stats, 2 * channels + 1, "batchnorm_stats");
  double* st = stats.data<double>();
  for (int64_t i = 0; i < 2 * channels; ++i) st[i] = 0;
  st[2 * channels] = double(n * spatial);
  if (x.channel_block()) {
    const std::vector<float> zero(size_t(channels), 0.0f);
    kernel_table<float>().bn_blocked_sums(blocked_shape(x, channels, spatial, "batchnorm_stats"),
                                          x.data<float>(), x.data<float>(), zero.data(), st, st + channels,
                                          nullptr);
    return;
  }
  dispatch_float(x.dtype(), "batchnorm_stats", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < channels; ++c) {
        const T* row = x.data<T>() + (s * channels + c) * spatial;
        double total = 0, total_sq = 0;
        k.bn_row_sums(row, row, T(0), spatial, &total, &total_sq);
        st[c] += total;
        st[channels + c] += total_sq;
      }
  });
}

void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var) {
  check_sums(stats, 2 * channels + 1, "batchnorm_finalize");
  const double* st = stats.data<double>();
  const double m = st[2 * channels];
  HPC_ASSERT(m > 0, "batchnorm_finalize: empty batch");
  // PyTorch's running variance is unbiased; one element per channel has none, keep the biased 0.
  const double unbias = m > 1 ? m / (m - 1) : 1.0;
  dispatch_float(mean.dtype(), "batchnorm_finalize", [&]<typename T>() {
    for (int64_t c = 0; c < channels; ++c) {
      const double mu = st[c] / m;
      const double var = std::max(st[channels + c] / m - mu * mu, 0.0);
      mean.data<T>()[c] = T(mu);
      invstd.data<T>()[c] = T(1.0 / std::sqrt(var + eps));
      if (running_mean.defined()) {
        T& rm = running_mean.data<T>()[c];
        T& rv = running_var.data<T>()[c];
        rm = T((1 - momentum) * double(rm) + momentum * mu);
        rv = T((1 - momentum) * double(rv) + momentum * var * unbias);
      }
    }
  });
}

void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd) {
  dispatch_float(mean.dtype(), "batchnorm_running_inverse", [&]<typename T>() {
    const int64_t channels = mean.count();
    for (int64_t c = 0; c < channels; ++c) {
      mean.data<T>()[c] = running_mean.data<T>()[c];
      invstd.data<T>()[c] = T(1.0 / std::sqrt(double(running_var.data<T>()[c]) + eps));
    }
  });
}

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, bool relu, int64_t channels, int64_t spatial, const Tensor& y) {
  const int64_t n = rows_of(x, channels, spatial);
  HPC_ASSERT(y.count() == x.count() && y.channel_block() == x.channel_block(), "batchnorm_normalize: shapes");
  if (x.channel_block()) {
    const std::vector<float> gain = gains_of<float>(gamma, invstd, channels);
    kernel_table<float>().bn_blocked_normalize(blocked_shape(x, channels, spatial, "batchnorm_normalize"),
                                               x.data<float>(), y.data<float>(), mean.data<float>(),
                                               gain.data(), beta.data<float>(), relu);
    return;
  }
  dispatch_float(y.dtype(), "batchnorm_normalize", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    const std::vector<T> gain = gains_of<T>(gamma, invstd, channels);
    for (int64_t c = 0; c < channels; ++c) {
      const T mu = mean.data<T>()[c], shift = beta.data<T>()[c];
      for (int64_t s = 0; s < n; ++s) {
        const int64_t at = (s * channels + c) * spatial;
        k.bn_normalize_row(x.data<T>() + at, y.data<T>() + at, spatial, mu, gain[size_t(c)], shift, relu);
      }
    }
  });
}

void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               const Tensor& gamma, const Tensor& beta, bool relu, int64_t channels,
                               int64_t spatial, const Tensor& grad_sums, const Tensor& dgamma,
                               const Tensor& dbeta) {
  const int64_t n = rows_of(x, channels, spatial);
  check_sums(grad_sums, 2 * channels, "batchnorm_backward_reduce");
  double* gs = grad_sums.data<double>();
  HPC_ASSERT(dy.channel_block() == x.channel_block(), "batchnorm_backward_reduce: layouts differ");
  if (x.channel_block()) {
    for (int64_t i = 0; i < 2 * channels; ++i) gs[i] = 0;
    const std::vector<float> gain = relu ? gains_of<float>(gamma, invstd, channels) : std::vector<float>();
    const ReluMask<float> mask{mean.data<float>(), gain.data(), relu ? beta.data<float>() : nullptr};
    kernel_table<float>().bn_blocked_sums(blocked_shape(x, channels, spatial, "batchnorm_backward_reduce"),
                                          dy.data<float>(), x.data<float>(), mean.data<float>(), gs,
                                          gs + channels, relu ? &mask : nullptr);
    for (int64_t c = 0; c < channels; ++c) {  // Σdy·(x − mean) → Σdy·x̂
      gs[channels + c] *= double(invstd.data<float>()[c]);
      dgamma.data<float>()[c] += float(gs[channels + c]);
      dbeta.data<float>()[c] += float(gs[c]);
    }
    return;
  }
  dispatch_float(dy.dtype(), "batchnorm_backward_reduce", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    const std::vector<T> gain = relu ? gains_of<T>(gamma, invstd, channels) : std::vector<T>();
    std::vector<T> masked(relu ? size_t(spatial) : 0);
    for (int64_t c = 0; c < channels; ++c) {
      const T mu = mean.data<T>()[c];
      double sum_dy = 0, sum_dy_xc = 0;  // Σdy and Σdy·(x − mean)
      for (int64_t s = 0; s < n; ++s) {
        const T* xr = x.data<T>() + (s * channels + c) * spatial;
        const T* gr = dy.data<T>() + (s * channels + c) * spatial;
        if (relu) {
          k.bn_mask_row(xr, gr, masked.data(), spatial, mu, gain[size_t(c)], beta.data<T>()[c]);
          gr = masked.data();
        }
        k.bn_row_sums(gr, xr, mu, spatial, &sum_dy, &sum_dy_xc);
      }
      const double sum_dy_xhat = sum_dy_xc * double(invstd.data<T>()[c]);
      gs[c] = sum_dy;
      gs[channels + c] = sum_dy_xhat;
      dgamma.data<T>()[c] += T(sum_dy_xhat);
      dbeta.data<T>()[c] += T(sum_dy);
    }
  });
}

void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& beta, bool relu, const Tensor& stats,
                           const Tensor& grad_sums, int64_t channels, int64_t spatial, const Tensor& dx) {
  const int64_t n = rows_of(x, channels, spatial);
  const bool batch_stats = grad_sums.defined();
  if (batch_stats) {
    check_sums(stats, 2 * channels + 1, "batchnorm_backward_dx");
    check_sums(grad_sums, 2 * channels, "batchnorm_backward_dx");
  }
  HPC_ASSERT(dy.channel_block() == x.channel_block() && dx.channel_block() == x.channel_block(),
             "batchnorm_backward_dx: layouts differ");
  dispatch_float(dx.dtype(), "batchnorm_backward_dx", [&]<typename T>() {
    // dx = a·(dy − Σdy/M − x̂·Σdy·x̂/M), x̂ = (x − mean)·invstd, as k1·dy + k2·(x − mean) + k3.
    std::vector<T> ks(3 * static_cast<size_t>(channels), T(0));
    T *k1 = ks.data(), *k2 = k1 + channels, *k3 = k2 + channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double istd = double(invstd.data<T>()[c]);
      const double a = double(gamma.data<T>()[c]) * istd;
      k1[c] = T(a);
      if (batch_stats) {
        const double m = stats.data<double>()[2 * channels];
        const double g_mean = grad_sums.data<double>()[c] / m;
        const double g_xhat = grad_sums.data<double>()[channels + c] / m;
        k2[c] = T(-a * istd * g_xhat);
        k3[c] = T(-a * g_mean);
      }
    }
    const std::vector<T> gain = relu ? gains_of<T>(gamma, invstd, channels) : std::vector<T>();
    if (x.channel_block()) {  // float32 only: blocked_shape refuses another dtype
      [[maybe_unused]] const BlockedShape shape =
          blocked_shape(x, channels, spatial, "batchnorm_backward_dx");
      if constexpr (std::is_same_v<T, float>) {
        const ReluMask<float> mask{mean.data<float>(), gain.data(), relu ? beta.data<float>() : nullptr};
        kernel_table<float>().bn_blocked_affine(shape, dy.data<float>(), x.data<float>(), dx.data<float>(),
                                                k1, k2, k3, mean.data<float>(), relu ? &mask : nullptr);
      }
      return;
    }
    const KernelTable<T>& k = kernel_table<T>();
    std::vector<T> masked(relu ? size_t(spatial) : 0);
    for (int64_t c = 0; c < channels; ++c) {
      const T k1t = k1[c], k2t = k2[c], k3t = k3[c], mu = mean.data<T>()[c];
      for (int64_t s = 0; s < n; ++s) {
        const T* xr = x.data<T>() + (s * channels + c) * spatial;
        const T* gr = dy.data<T>() + (s * channels + c) * spatial;
        T* out = dx.data<T>() + (s * channels + c) * spatial;
        if (relu) {
          k.bn_mask_row(xr, gr, masked.data(), spatial, mu, gain[size_t(c)], beta.data<T>()[c]);
          gr = masked.data();
        }
        k.bn_dx_row(xr, gr, out, spatial, k1t, k2t, k3t, mu);
      }
    }
  });
}

}  // namespace hpc::backend::cpu
