// Batch-normalisation kernels (see batchnorm.cuh). Per-channel sums go
// through channel_partials_kernel; per-channel finishing steps run one
// thread per channel in double (norm_math.h); the element-wise passes are
// grid-stride loops.
#include "backend/cuda/check.h"
#include "kernels/batchnorm.cuh"
#include "kernels/device_util.cuh"
#include "kernels/norm_math.h"
#include "kernels/reduce.cuh"

namespace hpc::kernels {

namespace {

// ---- kernels ------------------------------------------------------------------

template <typename T>
struct StatsTerm {  // Σx and Σx²
  const T* x;
  __device__ void operator()(int64_t i, int64_t, double* acc) const {
    const double v = static_cast<double>(x[i]);
    acc[0] += v;
    acc[1] += v * v;
  }
};

template <typename T>
struct GradTerm {  // Σdy and Σdy·(x − mean)
  const T* x;
  const T* dy;
  const compute_t<T>* mean;
  __device__ void operator()(int64_t i, int64_t c, double* acc) const {
    const double g = static_cast<double>(dy[i]);
    acc[0] += g;
    acc[1] += g * (static_cast<double>(x[i]) - static_cast<double>(mean[c]));
  }
};

__global__ void stats_finish_kernel(const double* partials, double* stats, int64_t channels, int64_t splits,
                                    double count) {
  for (int64_t c = thread_index(); c < channels; c += grid_stride()) {
    stats[c] = channel_total(partials, 0, c, channels, splits);
    stats[channels + c] = channel_total(partials, 1, c, channels, splits);
  }
  if (thread_index() == 0) stats[2 * channels] = count;
}

template <typename S>
__global__ void finalize_kernel(const double* stats, int64_t channels, double eps, double momentum, S* mean,
                                S* invstd, S* running_mean, S* running_var) {
  const double m = stats[2 * channels];
  for (int64_t c = thread_index(); c < channels; c += grid_stride()) {
    S unused_mean = S(0), unused_var = S(0);
    const bool update = running_mean != nullptr;
    bn_finalize_channel(stats[c], stats[channels + c], m, eps, momentum, update, mean[c], invstd[c],
                        update ? running_mean[c] : unused_mean, update ? running_var[c] : unused_var);
  }
}

template <typename S>
__global__ void running_inverse_kernel(const S* running_mean, const S* running_var, int64_t channels,
                                       double eps, S* mean, S* invstd) {
  for (int64_t c = thread_index(); c < channels; c += grid_stride()) {
    mean[c] = running_mean[c];
    invstd[c] = S(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

template <typename T>
__global__ void normalize_kernel(const T* x, const compute_t<T>* mean, const compute_t<T>* invstd,
                                 const T* gamma, const T* beta, T* y, int64_t n, int64_t channels,
                                 int64_t spatial) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / spatial) % channels;
    y[i] = bn_normalize_element(x[i], mean[c], invstd[c], gamma[c], beta[c]);
  }
}

template <typename T>
__global__ void grad_finish_kernel(const double* partials, const compute_t<T>* invstd, double* grad_sums,
                                   T* dgamma, T* dbeta, int64_t channels, int64_t splits) {
  using C = compute_t<T>;
  for (int64_t c = thread_index(); c < channels; c += grid_stride()) {
    const double sum_dy = channel_total(partials, 0, c, channels, splits);
    const double sum_dy_xhat =
        channel_total(partials, 1, c, channels, splits) * static_cast<double>(invstd[c]);
    grad_sums[c] = sum_dy;
    grad_sums[channels + c] = sum_dy_xhat;
    dgamma[c] = T(C(dgamma[c]) + C(sum_dy_xhat));
    dbeta[c] = T(C(dbeta[c]) + C(sum_dy));
  }
}

template <typename T>
__global__ void dx_coeffs_kernel(const compute_t<T>* invstd, const T* gamma, const double* stats,
                                 const double* grad_sums, int64_t channels, compute_t<T>* coeffs) {
  using C = compute_t<T>;
  const bool batch = grad_sums != nullptr;
  const double m = batch ? stats[2 * channels] : 1.0;
  for (int64_t c = thread_index(); c < channels; c += grid_stride()) {
    const BnDxCoeffs k = bn_dx_coeffs(static_cast<double>(gamma[c]), static_cast<double>(invstd[c]), batch, m,
                                      batch ? grad_sums[c] : 0.0, batch ? grad_sums[channels + c] : 0.0);
    coeffs[c] = C(k.k1);
    coeffs[channels + c] = C(k.k2);
    coeffs[2 * channels + c] = C(k.k3);
  }
}

template <typename T>
__global__ void dx_kernel(const T* x, const T* dy, const compute_t<T>* mean, const compute_t<T>* coeffs,
                          T* dx, int64_t n, int64_t channels, int64_t spatial) {
  for (int64_t i = thread_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / spatial) % channels;
    dx[i] = bn_dx_element(x[i], dy[i], mean[c], coeffs[c], coeffs[channels + c], coeffs[2 * channels + c]);
  }
}

dim3 channel_grid(int64_t rows, int64_t channels, int64_t spatial) {
  return dim3(static_cast<unsigned>(channels),
              static_cast<unsigned>(channel_splits(rows * spatial, channels)));
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

template <typename T>
void bn_stats(const T* x, int64_t rows, int64_t channels, int64_t spatial, double* stats, double* partials,
              cudaStream_t stream) {
  const dim3 grid = channel_grid(rows, channels, spatial);
  channel_partials_kernel<2><<<grid, BLOCK, 0, stream>>>(StatsTerm<T>{x}, rows, channels, spatial, partials);
  cudaLaunchCheck();
  stats_finish_kernel<<<grid_for(channels), BLOCK, 0, stream>>>(partials, stats, channels, grid.y,
                                                                static_cast<double>(rows * spatial));
  cudaLaunchCheck();
}

template <typename S>
void bn_finalize(const double* stats, int64_t channels, double eps, double momentum, S* mean, S* invstd,
                 S* running_mean, S* running_var, cudaStream_t stream) {
  finalize_kernel<<<grid_for(channels), BLOCK, 0, stream>>>(stats, channels, eps, momentum, mean, invstd,
                                                            running_mean, running_var);
  cudaLaunchCheck();
}

template <typename S>
void bn_running_inverse(const S* running_mean, const S* running_var, int64_t channels, double eps, S* mean,
                        S* invstd, cudaStream_t stream) {
  running_inverse_kernel<<<grid_for(channels), BLOCK, 0, stream>>>(running_mean, running_var, channels, eps,
                                                                   mean, invstd);
  cudaLaunchCheck();
}

template <typename T>
void bn_normalize(const T* x, const compute_t<T>* mean, const compute_t<T>* invstd, const T* gamma,
                  const T* beta, T* y, int64_t rows, int64_t channels, int64_t spatial, cudaStream_t stream) {
  const int64_t n = rows * channels * spatial;
  if (n <= 0) return;
  normalize_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, mean, invstd, gamma, beta, y, n, channels, spatial);
  cudaLaunchCheck();
}

template <typename T>
void bn_backward_reduce(const T* x, const T* dy, const compute_t<T>* mean, const compute_t<T>* invstd,
                        int64_t rows, int64_t channels, int64_t spatial, double* grad_sums, T* dgamma,
                        T* dbeta, double* partials, cudaStream_t stream) {
  const dim3 grid = channel_grid(rows, channels, spatial);
  channel_partials_kernel<2>
      <<<grid, BLOCK, 0, stream>>>(GradTerm<T>{x, dy, mean}, rows, channels, spatial, partials);
  cudaLaunchCheck();
  grad_finish_kernel<<<grid_for(channels), BLOCK, 0, stream>>>(partials, invstd, grad_sums, dgamma, dbeta,
                                                               channels, grid.y);
  cudaLaunchCheck();
}

template <typename T>
void bn_backward_dx(const T* x, const T* dy, const compute_t<T>* mean, const compute_t<T>* invstd,
                    const T* gamma, const double* stats, const double* grad_sums, int64_t rows,
                    int64_t channels, int64_t spatial, T* dx, compute_t<T>* coeffs, cudaStream_t stream) {
  dx_coeffs_kernel<<<grid_for(channels), BLOCK, 0, stream>>>(invstd, gamma, stats, grad_sums, channels,
                                                             coeffs);
  cudaLaunchCheck();
  const int64_t n = rows * channels * spatial;
  if (n <= 0) return;
  dx_kernel<<<grid_for(n), BLOCK, 0, stream>>>(x, dy, mean, coeffs, dx, n, channels, spatial);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------

#define HPC_BN(T)                                                                                            \
  template void bn_stats<T>(const T*, int64_t, int64_t, int64_t, double*, double*, cudaStream_t);            \
  template void bn_normalize<T>(const T*, const compute_t<T>*, const compute_t<T>*, const T*, const T*, T*,  \
                                int64_t, int64_t, int64_t, cudaStream_t);                                    \
  template void bn_backward_reduce<T>(const T*, const T*, const compute_t<T>*, const compute_t<T>*, int64_t, \
                                      int64_t, int64_t, double*, T*, T*, double*, cudaStream_t);             \
  template void bn_backward_dx<T>(const T*, const T*, const compute_t<T>*, const compute_t<T>*, const T*,    \
                                  const double*, const double*, int64_t, int64_t, int64_t, T*,               \
                                  compute_t<T>*, cudaStream_t);
HPC_BN(float)
HPC_BN(double)
HPC_BN(Bf16)
HPC_BN(Half)
#undef HPC_BN

template void bn_finalize<float>(const double*, int64_t, double, double, float*, float*, float*, float*,
                                 cudaStream_t);
template void bn_finalize<double>(const double*, int64_t, double, double, double*, double*, double*, double*,
                                  cudaStream_t);
template void bn_running_inverse<float>(const float*, const float*, int64_t, double, float*, float*,
                                        cudaStream_t);
template void bn_running_inverse<double>(const double*, const double*, int64_t, double, double*, double*,
                                         cudaStream_t);

}  // namespace hpc::kernels
