// Loss kernels (see loss.cuh).
#include "backend/cuda/check.h"
#include "kernels/device_util.cuh"
#include "kernels/loss.cuh"
#include "kernels/loss_math.h"

namespace hpc::kernels {

namespace {

constexpr int32_t BAD_LABEL = -1;

// ---- kernels ------------------------------------------------------------------

// The block's total of v (sum, or max when MAX), in every thread. Fixed shuffle
// tree and warp order, so the result does not depend on timing.
template <bool MAX>
__device__ double block_all(double v, double* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const double o = __shfl_down_sync(0xffffffffu, v, offset);
    v = MAX ? fmax(v, o) : v + o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = shared[lane < warps ? lane : 0];  // a repeated warp total is harmless for max, dropped for sum
    if (!MAX && lane >= warps) v = 0;
    for (int offset = 16; offset > 0; offset /= 2) {
      const double o = __shfl_down_sync(0xffffffffu, v, offset);
      v = MAX ? fmax(v, o) : v + o;
    }
    if (lane == 0) shared[32] = v;
  }
  __syncthreads();
  v = shared[32];
  __syncthreads();  // `shared` is reused by the next reduction
  return v;
}

// One block per row (grid-stride over rows): the row's max and the label's rank,
// then Σexp and Σz, then the gradient — softmax_xent_row's math in double, its
// three passes split across the block's threads. A row of a 50k vocabulary is
// one block's work, not one thread's.
template <typename T>
__global__ void xent_rows_kernel(const T* logits, const int32_t* labels, int64_t n_valid, int64_t k,
                                 double smoothing, double grad_scale, T* dlogits, double* row_loss,
                                 int32_t* row_rank) {
  __shared__ double shared[33];
  for (int64_t r = blockIdx.x; r < n_valid; r += gridDim.x) {
    const int32_t label = labels[r];
    if (label < 0 || label >= k) {  // the host names the sample and the label
      if (threadIdx.x == 0) {
        row_loss[r] = 0;
        row_rank[r] = BAD_LABEL;
      }
      continue;
    }
    const T* z = logits + r * k;
    const T zl = z[label];
    double m = -INFINITY, above = 0;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
      const T v = z[j];
      m = fmax(m, double(v));
      above += (v > zl) || (j < label && v == zl) ? 1 : 0;  // label_rank's rule
    }
    m = block_all<true>(m, shared);
    above = block_all<false>(above, shared);
    double sum_exp = 0, sum_z = 0;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
      const double v = double(z[j]);
      sum_exp += exp(v - m);
      sum_z += v;
    }
    sum_exp = block_all<false>(sum_exp, shared);
    sum_z = block_all<false>(sum_z, shared);
    const double lse = m + log(sum_exp), off = smoothing / double(k), on = 1 - smoothing;
    if (dlogits != nullptr) {
      T* dz = dlogits + r * k;
      for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
        const T g = T(grad_scale * (exp(double(z[j]) - lse) - off));
        dz[j] = j == label ? T(double(g) - grad_scale * on) : g;  // rounded twice, as on the CPU
      }
    }
    if (threadIdx.x == 0) {
      row_loss[r] = lse - on * double(zl) - off * sum_z;
      row_rank[r] = static_cast<int32_t>(above < 5 ? above : 5);  // only < 1 and < 5 matter
    }
  }
}

// One block: each thread adds a fixed strided subset, then the block tree.
__global__ void xent_totals_kernel(const double* row_loss, const int32_t* row_rank, int64_t n,
                                   bool count_top5, double* totals) {
  __shared__ double shared[32];
  double loss = 0, top1 = 0, top5 = 0, bad = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    const int32_t rank = row_rank[r];
    loss += row_loss[r];
    top1 += rank == 0 ? 1 : 0;
    top5 += count_top5 && rank >= 0 && rank < 5 ? 1 : 0;
    bad += rank == BAD_LABEL ? 1 : 0;
  }
  loss = block_sum(loss, shared);
  top1 = block_sum(top1, shared);
  top5 = block_sum(top5, shared);
  bad = block_sum(bad, shared);
  if (threadIdx.x == 0) {
    totals[0] = loss;
    totals[1] = top1;
    totals[2] = top5;
    totals[3] = bad;
  }
}

template <typename T>
__global__ void squared_error_rows_kernel(const T* y, const T* target, int64_t n_valid, int64_t k,
                                          double grad_scale, T* dy, double* row_loss) {
  for (int64_t r = thread_index(); r < n_valid; r += grid_stride())
    row_loss[r] = squared_error_row<double>(y + r * k, target + r * k, k, grad_scale,
                                            dy != nullptr ? dy + r * k : nullptr);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

template <typename T>
void softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t n_valid, int64_t k,
                           double smoothing, double grad_scale, bool count_top5, T* dlogits, double* row_loss,
                           int32_t* row_rank, double* totals, cudaStream_t stream) {
  if (n_valid > 0) {
    const int threads = k >= 2048 ? 512 : k >= 256 ? 128 : 32;  // a warp for a handful of classes
    xent_rows_kernel<<<grid_for(n_valid, 1), threads, 0, stream>>>(logits, labels, n_valid, k, smoothing,
                                                                   grad_scale, dlogits, row_loss, row_rank);
    cudaLaunchCheck();
  }
  xent_totals_kernel<<<1, 1024, 0, stream>>>(row_loss, row_rank, n_valid, count_top5, totals);
  cudaLaunchCheck();
}

template <typename T>
void squared_error(const T* y, const T* target, int64_t n_valid, int64_t k, double grad_scale, T* dy,
                   double* row_loss, cudaStream_t stream) {
  if (n_valid <= 0) return;
  squared_error_rows_kernel<<<grid_for(n_valid, 128), 128, 0, stream>>>(y, target, n_valid, k, grad_scale, dy,
                                                                        row_loss);
  cudaLaunchCheck();
}

// ---- instantiations ----------------------------------------------------------------

#define HPC_LOSS(T)                                                                                        \
  template void softmax_cross_entropy<T>(const T*, const int32_t*, int64_t, int64_t, double, double, bool, \
                                         T*, double*, int32_t*, double*, cudaStream_t);                    \
  template void squared_error<T>(const T*, const T*, int64_t, int64_t, double, T*, double*, cudaStream_t);
HPC_LOSS(float)
HPC_LOSS(double)
HPC_LOSS(Bf16)
HPC_LOSS(Half)
#undef HPC_LOSS

}  // namespace hpc::kernels
