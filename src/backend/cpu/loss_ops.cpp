// CPU losses: one call of the per-row math per sample, accumulated in double;
// rows past n_valid are padding and get a zero gradient so the caller never
// has to clear them. Cross-entropy rows are the kernel table's
// (isa/kernel_table.h: kernels/loss_math.h's formulas, in float32 with one
// float exp per logit); the squared error is kernels/loss_math.h's row.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/isa/kernel_table.h"
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
    const KernelTable<T>& table = kernel_table<T>();
    for (int64_t i = 0; i < n_valid; ++i) {
      const T* z = logits.data<T>() + i * k;
      T* dz = dlogits.defined() ? dlogits.data<T>() + i * k : nullptr;
      st.loss_sum += table.xent_row(z, k, lab[i], label_smoothing, grad_scale, dz);
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
