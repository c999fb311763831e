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

// ---- one row of a vocabulary shard (the vocabulary-parallel cross-entropy) ----
// z holds columns [col0, col0 + width) of a row; the first `real` of them are
// real classes (the rest padding of the split vocabulary); the group's
// maximum M, Σexp S and the label's logit Z come from the other passes.

template <typename T>
HD double shard_row_max(const T* z, int64_t real) {
  double m = -INFINITY;
  for (int64_t j = 0; j < real; ++j) m = double(z[j]) > m ? double(z[j]) : m;
  return m;
}

// *sum_exp = Σ exp(z − M), *sum_z = Σ z, *zl = z[label − col0] when the shard holds the label, else 0.
template <typename T>
HD void shard_row_sums(const T* z, int64_t real, int64_t col0, int32_t label, double m, double* sum_exp,
                       double* sum_z, double* zl) {
  double e = 0, s = 0;
  for (int64_t j = 0; j < real; ++j) {
    e += exp(double(z[j]) - m);
    s += double(z[j]);
  }
  *sum_exp = e;
  *sum_z = s;
  *zl = label >= col0 && label < col0 + real ? double(z[label - col0]) : 0.0;
}

// The gradient of one shard row (dz may be null) and how many of its real columns rank above the
// label, whose logit is zl (label_rank's rule: a larger logit, or an equal one at a smaller index).
template <typename T>
HD int64_t shard_row_grad(const T* z, int64_t width, int64_t real, int64_t col0, int32_t label, double m,
                          double sum_exp, double zl, double smoothing, int64_t vocab, double grad_scale,
                          T* dz) {
  const double off = smoothing / double(vocab), on = 1 - smoothing, inv = 1 / sum_exp;
  int64_t above = 0;
  for (int64_t j = 0; j < real; ++j) {
    const double v = double(z[j]);
    above += (v > zl) || (col0 + j < label && v == zl) ? 1 : 0;
    if (dz != nullptr) {
      const T g = T(grad_scale * (exp(v - m) * inv - off));
      dz[j] = col0 + j == label ? T(double(g) - grad_scale * on) : g;  // rounded twice, as the unsplit row
    }
  }
  if (dz != nullptr)
    for (int64_t j = real; j < width; ++j) dz[j] = T(0);
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
