// Per-row loss math of the CPU loops (and of the CUDA squared-error kernel;
// the CUDA cross-entropy kernel splits softmax_xent_row's passes across a
// block, with the same formulas in double, see loss.cu).
//
// One row is one sample's K outputs. Cross-entropy works in log space with
// the row maximum subtracted first (log-sum-exp), so logits of any size
// neither overflow exp() nor lose the small probabilities. Accumulation is
// in Acc (double on the CPU) because a float sum over a large vocabulary
// would otherwise round away the tail of the softmax.
#pragma once

#include <cmath>
#include <cstdint>

#include "hd.h"

namespace hpc::kernels {

// Softmax cross-entropy of one row against the label-smoothed target
// t = (1 − ε)·onehot(label) + ε/K. Returns −Σ_j t_j·log softmax(z)_j and,
// when dz is non-null, writes dz_j = grad_scale·(softmax(z)_j − t_j).
template <typename Acc, typename T>
HD Acc softmax_xent_row(const T* z, int64_t k, int32_t label, Acc smoothing, Acc grad_scale, T* dz) {
  T m = z[0];
  for (int64_t j = 1; j < k; ++j) m = z[j] > m ? z[j] : m;
  Acc sum_exp = 0, sum_z = 0;
  for (int64_t j = 0; j < k; ++j) {
    sum_exp += std::exp(Acc(z[j]) - Acc(m));
    sum_z += Acc(z[j]);
  }
  // cppcheck-suppress invalidFunctionArg ; sum_exp >= 1: the largest logit adds exp(0) (k >= 1)
  const Acc lse = Acc(m) + std::log(sum_exp);
  const Acc off = smoothing / Acc(k);  // target mass of every class
  const Acc on = Acc(1) - smoothing;   // extra mass of the label
  if (dz != nullptr) {
    for (int64_t j = 0; j < k; ++j) dz[j] = T(grad_scale * (std::exp(Acc(z[j]) - lse) - off));
    dz[label] = T(Acc(dz[label]) - grad_scale * on);
  }
  // Σ_j t_j = 1, so −Σ t_j (z_j − lse) = lse − on·z_label − off·Σ z_j.
  return lse - on * Acc(z[label]) - off * sum_z;
}

// How many classes rank above the label: those with a larger logit, and
// those with an equal logit and a smaller index (argmax picks the first).
// Top-k is correct when this is < k.
template <typename T>
HD int64_t label_rank(const T* z, int64_t k, int32_t label) {
  const T zl = z[label];
  int64_t above = 0;
  for (int64_t j = 0; j < k; ++j) above += (z[j] > zl) || (j < label && z[j] == zl);
  return above;
}

// Σ_j (y_j − t_j)² of one row; writes dy_j = grad_scale·2·(y_j − t_j) when dy is non-null.
template <typename Acc, typename T>
HD Acc squared_error_row(const T* y, const T* t, int64_t k, Acc grad_scale, T* dy) {
  Acc s = 0;
  for (int64_t j = 0; j < k; ++j) {
    const Acc d = Acc(y[j]) - Acc(t[j]);
    s += d * d;
    if (dy != nullptr) dy[j] = T(grad_scale * 2 * d);
  }
  return s;
}

}  // namespace hpc::kernels
