// Per-element optimizer update rules, shared by the CPU backend and the CUDA
// kernels so that the CPU unit tests test the GPU's arithmetic too.
//
// Every rule follows PyTorch's torch.optim semantics (1.13, single-tensor
// path) so that hyper-parameters taken from published PyTorch recipes mean
// the same thing here:
//   SGD    buf = μ·buf + g;  p -= lr·buf  (Nesterov: p -= lr·(g + μ·buf)); no dampening.
//          The buffer starts at zero, so the first step gives buf = g, which
//          is PyTorch's "buf = clone(g)".
//   L2     g += wd·p before the update (SGD and Adam "weight_decay").
//   Adam   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//          p -= (lr / (1−β1ᵗ)) · m / (sqrt(v) / sqrt(1−β2ᵗ) + eps)   (Kingma & Ba 2015)
//   AdamW  p *= 1 − lr·wd first, then Adam without L2 (Loshchilov & Hutter 2019).
//
// The per-step scalars (bias corrections, 1−β, 1−lr·wd) are computed once in
// double on the host, as PyTorch does in Python, and handed to the element
// functions already rounded to T; the element functions only do T arithmetic.
#pragma once

#include <cmath>
#include <cstdint>

#include "hd.h"

namespace hpc::kernels {

// ---- coefficients (host, once per step and range) ---------------------------

template <typename T>
struct SgdCoeffs {
  T lr;
  T momentum;      // 0 = plain SGD: no buffer is read or written
  T weight_decay;  // L2; 0 outside the decay ranges
  bool nesterov;
};

template <typename T>
struct AdamCoeffs {
  T beta1, one_minus_beta1;
  T beta2, one_minus_beta2;
  T step_size;                  // lr / (1 − β1ᵗ)
  T bias_correction2_sqrt;      // sqrt(1 − β2ᵗ)
  T inv_bias_correction2_sqrt;  // 1 / sqrt(1 − β2ᵗ)
  T eps;
  T l2_decay;        // Adam: wd folded into g; AdamW: 0
  T decoupled_keep;  // AdamW: 1 − lr·wd applied to p; Adam: exactly 1
};

template <typename T>
inline SgdCoeffs<T> make_sgd_coeffs(double lr, double momentum, bool nesterov, double weight_decay) {
  return {static_cast<T>(lr), static_cast<T>(momentum), static_cast<T>(weight_decay), nesterov};
}

// step is the 1-based index of the step being taken (PyTorch's state["step"] after its increment).
template <typename T>
inline AdamCoeffs<T> make_adam_coeffs(double lr, double beta1, double beta2, double eps, double weight_decay,
                                      bool decoupled, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  AdamCoeffs<T> c;
  c.beta1 = static_cast<T>(beta1);
  c.one_minus_beta1 = static_cast<T>(1.0 - beta1);
  c.beta2 = static_cast<T>(beta2);
  c.one_minus_beta2 = static_cast<T>(1.0 - beta2);
  c.step_size = static_cast<T>(lr / bias_correction1);
  c.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  c.inv_bias_correction2_sqrt = static_cast<T>(1.0 / std::sqrt(bias_correction2));
  c.eps = static_cast<T>(eps);
  c.l2_decay = static_cast<T>(decoupled ? 0.0 : weight_decay);
  c.decoupled_keep = static_cast<T>(decoupled ? 1.0 - lr * weight_decay : 1.0);
  return c;
}

// ---- element rules ----------------------------------------------------------

// L2 weight decay as PyTorch applies it: into the gradient, before momentum or moments.
template <typename T>
HD T l2_decayed_grad(T g, T p, T weight_decay) {
  return weight_decay != T(0) ? g + weight_decay * p : g;
}

// SGD without momentum (no state).
template <typename T>
HD void sgd_plain_update(T& p, T g, const SgdCoeffs<T>& c) {
  p -= c.lr * l2_decayed_grad(g, p, c.weight_decay);
}

// SGD with momentum, optionally Nesterov; buf is this element's momentum buffer.
template <typename T>
HD void sgd_momentum_update(T& p, T& buf, T g, const SgdCoeffs<T>& c) {
  g = l2_decayed_grad(g, p, c.weight_decay);
  buf = c.momentum * buf + g;
  const T direction = c.nesterov ? g + c.momentum * buf : buf;
  p -= c.lr * direction;
}

// Adam (l2_decay) or AdamW (decoupled_keep); m = exp_avg, v = exp_avg_sq.
template <typename T>
HD void adam_update(T& p, T& m, T& v, T g, const AdamCoeffs<T>& c) {
  g = l2_decayed_grad(g, p, c.l2_decay);
  p *= c.decoupled_keep;  // exact no-op when it is 1 (Adam, or outside the decay ranges)
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  using std::sqrt;  // the float overload on the host; CUDA's device sqrt otherwise
  // × 1/√bc2 instead of ÷ √bc2 (PyTorch divides): one division per element
  // fewer, ≤ 1 ulp apart; the CPU loop is bound by its divisions and square root.
  const T denom = sqrt(v) * c.inv_bias_correction2_sqrt + c.eps;
  p -= c.step_size * m / denom;
}

}  // namespace hpc::kernels
