// Loss kernels (see loss.cuh).
#include "backend/cuda/check.h"
#include "kernels/device_util.cuh"
#include "kernels/loss.cuh"
#include "kernels/loss_math.h"

namespace hpc::kernels {

namespace {

constexpr int32_t BAD_LABEL = -1;

// ---- kernels ------------------------------------------------------------------

template <typename T>
__global__ void xent_rows_kernel(const T* logits, const int32_t* labels, int64_t n_valid, int64_t k,
                                 double smoothing, double grad_scale, T* dlogits, double* row_loss,
                                 int32_t* row_rank) {
  for (int64_t r = thread_index(); r < n_valid; r += grid_stride()) {
    const int32_t label = labels[r];
    if (label < 0 || label >= k) {  // the host names the sample and the label
      row_loss[r] = 0;
      row_rank[r] = BAD_LABEL;
      continue;
    }
    const T* z = logits + r * k;
    row_loss[r] = softmax_xent_row<double>(z, k, label, smoothing, grad_scale,
                                           dlogits != nullptr ? dlogits + r * k : nullptr);
    const int64_t rank = label_rank(z, k, label);
    row_rank[r] = static_cast<int32_t>(rank < 5 ? rank : 5);  // only < 1 and < 5 matter
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
    xent_rows_kernel<<<grid_for(n_valid, 128), 128, 0, stream>>>(logits, labels, n_valid, k, smoothing,
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
