// CPU losses: one call of the shared per-row math (kernels/loss_math.h)
// per sample, accumulated in double; rows past n_valid are padding and get
// a zero gradient so the caller never has to clear them.
//
// Float32 cross-entropy rows take their exps from vec_math.h's exp8 instead
// (two double exps per logit were ~1.5% of a gpt-small step, vocabulary
// 256): one float exp per logit, summed in double with eight fixed partial
// sums, and the gradient from those exps divided by their total.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/vec_math.h"
#include "backend/dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/loss_math.h"

namespace hpc::backend::cpu {

namespace {

void zero_rows(const Tensor& t, int64_t from, int64_t width) {
  if (!t.defined()) return;
  const size_t row_bytes = static_cast<size_t>(width) * dtype_size(t.dtype());
  const int64_t rows = t.count() / width;
  if (from < rows) std::memset(static_cast<char*>(t.raw()) + from * row_bytes, 0, (rows - from) * row_bytes);
}

#if HPC_CPU_VEC_EXP
// kernels::softmax_xent_row<double> for a float32 row, the exps in float: the
// same loss and gradient to float precision (relative ~1e-7).
double xent_row_f32(const float* z, int64_t k, int32_t label, double smoothing, double grad_scale,
                    float* dz) {
  float m = z[0];
  for (int64_t j = 1; j < k; ++j) m = z[j] > m ? z[j] : m;
  const __m256 shift = _mm256_set1_ps(m);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // the exps' eight partial sums
  double sum_z = 0;
  for (int64_t j = 0; j < k; j += 8) {
    const int64_t n = std::min<int64_t>(8, k - j);
    const __m256 x = n == 8 ? _mm256_loadu_ps(z + j) : load_partial(z + j, n);
    __m256 e = exp8(_mm256_sub_ps(x, shift));
    if (n < 8) {  // the padded lanes add nothing
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      e = _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane)));
    }
    if (dz != nullptr) n == 8 ? _mm256_storeu_ps(dz + j, e) : store_partial(dz + j, e, n);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    for (int64_t i = 0; i < n; ++i) sum_z += double(z[j + i]);
  }
  alignas(32) double part[8];
  _mm256_store_pd(part, lo);
  _mm256_store_pd(part + 4, hi);
  double sum_exp = 0;
  for (double p : part) sum_exp += p;
  const double lse = double(m) + std::log(sum_exp);
  const double off = smoothing / double(k), on = 1 - smoothing;
  if (dz != nullptr) {
    const double inv = 1 / sum_exp;
    for (int64_t j = 0; j < k; ++j) dz[j] = float(grad_scale * (double(dz[j]) * inv - off));
    dz[label] = float(double(dz[label]) - grad_scale * on);
  }
  return lse - on * double(z[label]) - off * sum_z;
}
#endif

}  // namespace

ClassifyStats softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t n_valid,
                                    double label_smoothing, double grad_scale, bool count_top5,
                                    const Tensor& dlogits) {
  const int64_t n = logits.shape()[0], k = logits.count() / n;
  HPC_ASSERT(labels.dtype() == DType::I32 && labels.count() >= n_valid && n_valid <= n,
             "cross-entropy: shapes");
  HPC_ASSERT(!dlogits.defined() || (dlogits.count() == logits.count() && dlogits.dtype() == logits.dtype()),
             "cross-entropy: dlogits shape");
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n_valid; ++i)
    if (lab[i] < 0 || lab[i] >= k)
      throw UserError("label " + std::to_string(lab[i]) + " of sample " + std::to_string(i) +
                      " is outside the model's " + std::to_string(k) + " classes [0, " + std::to_string(k) +
                      ")");
  ClassifyStats st;
  dispatch_float(logits.dtype(), "softmax_cross_entropy", [&]<typename T>() {
    for (int64_t i = 0; i < n_valid; ++i) {
      const T* z = logits.data<T>() + i * k;
      T* dz = dlogits.defined() ? dlogits.data<T>() + i * k : nullptr;
#if HPC_CPU_VEC_EXP
      if constexpr (std::is_same_v<T, float>)
        st.loss_sum += xent_row_f32(z, k, lab[i], label_smoothing, grad_scale, dz);
      else
#endif
        st.loss_sum += kernels::softmax_xent_row<double>(z, k, lab[i], label_smoothing, grad_scale, dz);
      const int64_t rank = kernels::label_rank(z, k, lab[i]);
      st.correct1 += rank < 1;
      if (count_top5) st.correct5 += rank < 5;
    }
  });
  zero_rows(dlogits, std::max<int64_t>(n_valid, 0), k);
  return st;
}

double squared_error(const Tensor& y, const Tensor& target, int64_t n_valid, double grad_scale,
                     const Tensor& dy) {
  const int64_t n = y.shape()[0], k = y.count() / n;
  HPC_ASSERT(target.dtype() == y.dtype() && target.count() == y.count() && n_valid <= n, "mse: shapes");
  HPC_ASSERT(!dy.defined() || (dy.count() == y.count() && dy.dtype() == y.dtype()), "mse: dy shape");
  double total = 0;
  dispatch_float(y.dtype(), "squared_error", [&]<typename T>() {
    for (int64_t i = 0; i < n_valid; ++i) {
      T* g = dy.defined() ? dy.data<T>() + i * k : nullptr;
      total +=
          kernels::squared_error_row<double>(y.data<T>() + i * k, target.data<T>() + i * k, k, grad_scale, g);
    }
  });
  zero_rows(dy, std::max<int64_t>(n_valid, 0), k);
  return total;
}

}  // namespace hpc::backend::cpu
