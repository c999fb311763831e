// Batch-normalisation arithmetic, shared by the CUDA kernels and the CPU
// tests: the per-channel finalisation (mean, 1/σ, running statistics) and
// backward coefficients, computed in double from the (all-reduced) sums, and
// the per-element normalise and dx formulas. They mirror the CPU backend's
// formulas (backend/cpu/norm_ops.cpp) term for term, so the two differ only
// by the order in which the per-channel sums were accumulated.
//
// T is the activation storage type, S the statistics type (float for
// float/bf16/fp16 activations, double for double).
#pragma once

#include <cmath>
#include <cstdint>

#include "cast_math.h"
#include "hd.h"

namespace hpc::kernels {

// From Σx, Σx² and the element count m of one channel: the batch mean, the
// inverse standard deviation with the biased variance, and (when update) the
// running estimates with PyTorch's momentum and unbiased variance.
template <typename S>
HD void bn_finalize_channel(double sum, double sum_sq, double m, double eps, double momentum, bool update,
                            S& mean, S& invstd, S& running_mean, S& running_var) {
  const double mu = sum / m;
  double var = sum_sq / m - mu * mu;
  var = var > 0.0 ? var : 0.0;
  using std::sqrt;  // the double overload on the host; CUDA's device sqrt otherwise
  mean = S(mu);
  invstd = S(1.0 / sqrt(var + eps));
  if (!update) return;
  const double unbias = m > 1 ? m / (m - 1) : 1.0;
  running_mean = S((1 - momentum) * double(running_mean) + momentum * mu);
  running_var = S((1 - momentum) * double(running_var) + momentum * var * unbias);
}

// y = (x − mean)·(gamma·invstd) + beta.
template <typename T, typename S>
HD T bn_normalize_element(T x, S mean, S invstd, T gamma, T beta) {
  using C = compute_t<T>;
  const C scale = C(gamma) * C(invstd);
  return T((C(x) - C(mean)) * scale + C(beta));
}

// dx = k1·dy + k2·(x − mean) + k3 (backend/ops.def gives the formula). Batch
// statistics: k1 = γ·σ⁻¹, k2 = −k1·σ⁻¹·Σdy·x̂/M, k3 = −k1·Σdy/M. Running
// statistics (mean and σ constants): k2 = k3 = 0.
struct BnDxCoeffs {
  double k1, k2, k3;
};
HD BnDxCoeffs bn_dx_coeffs(double gamma, double invstd, bool batch_stats, double m, double sum_dy,
                           double sum_dy_xhat) {
  const double a = gamma * invstd;
  if (!batch_stats) return {a, 0.0, 0.0};
  return {a, -a * invstd * (sum_dy_xhat / m), -a * (sum_dy / m)};
}

template <typename T, typename S>
HD T bn_dx_element(T x, T dy, S mean, S k1, S k2, S k3) {
  using C = compute_t<T>;
  return T(C(k1) * C(dy) + C(k2) * (C(x) - C(mean)) + C(k3));
}

}  // namespace hpc::kernels
