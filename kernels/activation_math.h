// Per-element activation math shared by the CPU loops and the CUDA kernels.
//
// Each activation has a forward f(x) and a backward that turns dy into dx.
// The backward takes whichever of x or y = f(x) makes it cheapest and
// exact: ReLU and GELU differentiate at x, tanh reuses y (1 − y²), so no
// transcendental function is evaluated twice.
//
// GELU is the tanh approximation used by GPT-2 (Hendrycks & Gimpel 2016,
// eq. 2): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), not the erf form.
#pragma once

#include <cmath>

#include "hd.h"

namespace hpc::kernels {

// The activations the backend ops and the kernels know (GELU: the tanh form above).
enum class ActivationKind { Relu, Gelu, Tanh };

template <typename T>
HD T relu_forward(T x) {
  return x > T(0) ? x : T(0);
}
// The subgradient at 0 is taken as 0, like PyTorch.
template <typename T>
HD T relu_backward(T x, T dy) {
  return x > T(0) ? dy : T(0);
}

constexpr double GELU_SQRT_2_OVER_PI = 0.7978845608028654;
constexpr double GELU_CUBIC = 0.044715;

// Evaluated as x·σ(2u) with u = √(2/π)(x + 0.044715x³), using
// 0.5·(1 + tanh(u)) = σ(2u) = 1/(1 + e^(−2u)): the same function, but one
// exp instead of a tanh, several times cheaper in libm, and no cancellation.
template <typename T>
HD T gelu_forward(T x) {
  const T u = T(GELU_SQRT_2_OVER_PI) * (x + T(GELU_CUBIC) * x * x * x);
  return x / (T(1) + std::exp(T(-2) * u));
}
// d/dx x·s = s + x·s'(x), with s = σ(2u) and s' = 2·s·(1 − s)·du/dx.
template <typename T>
HD T gelu_backward(T x, T dy) {
  const T x2 = x * x;
  const T s = T(1) / (T(1) + std::exp(T(-2 * GELU_SQRT_2_OVER_PI) * (x + T(GELU_CUBIC) * x2 * x)));
  const T du = T(GELU_SQRT_2_OVER_PI) * (T(1) + T(3 * GELU_CUBIC) * x2);
  return dy * (s + T(2) * x * s * (T(1) - s) * du);
}

template <typename T>
HD T tanh_forward(T x) {
  return std::tanh(x);
}
template <typename T>
HD T tanh_backward(T y, T dy) {
  return dy * (T(1) - y * y);
}

}  // namespace hpc::kernels
