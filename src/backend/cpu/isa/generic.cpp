// The generic tables (kernel_table.h): generic.h's loops for float32 and float64.
#include "backend/cpu/isa/generic.h"

namespace hpc::backend::cpu {

namespace {

// Out-of-line instances of generic.h's always-inline bodies (one per dtype).
template <typename T>
void row_sums(const T* a, const T* b, T shift, int64_t n, double* sum_u, double* sum_uv) {
  generic::bn_row_sums(a, b, shift, n, sum_u, sum_uv);
}
template <typename T>
void normalize_row(const T* x, T* y, int64_t n, T mu, T gain, T shift, bool relu) {
  generic::bn_normalize_row(x, y, n, mu, gain, shift, relu);
}
template <typename T>
void mask_row(const T* x, const T* dy, T* out, int64_t n, T mu, T gain, T shift) {
  generic::bn_mask_row(x, dy, out, n, mu, gain, shift);
}
template <typename T>
void dx_row(const T* x, const T* dy, T* dx, int64_t n, T k1, T k2, T k3, T mu) {
  generic::bn_dx_row(x, dy, dx, n, k1, k2, k3, mu);
}
void blocked_sums(const BlockedShape& s, const float* a, const float* b, const float* shift, double* sum_u,
                  double* sum_uv, const ReluMask<float>* relu) {
  generic::bn_blocked_sums(s, a, b, shift, sum_u, sum_uv, relu);
}
void blocked_affine(const BlockedShape& s, const float* a, const float* b, float* out, const float* k1,
                    const float* k2, const float* k3, const float* mu, const ReluMask<float>* relu) {
  generic::bn_blocked_affine(s, a, b, out, k1, k2, k3, mu, relu);
}
void blocked_normalize(const BlockedShape& s, const float* x, float* out, const float* mu, const float* gain,
                       const float* shift, bool relu) {
  generic::bn_blocked_normalize(s, x, out, mu, gain, shift, relu);
}
template <typename T>
void adam(T* p, T* m, T* v, const T* g, int64_t n, const kernels::AdamCoeffs<T>& c) {
  generic::adam(p, m, v, g, n, c);
}
template <typename T>
void bias_add_rows(T* y, const T* b, int64_t rows, int64_t channels, int64_t spatial) {
  generic::bias_add_rows(y, b, rows, channels, spatial);
}
template <typename T>
void bias_sums(const T* g, double* acc, int64_t rows, int64_t channels, int64_t spatial) {
  generic::bias_sums(g, acc, rows, channels, spatial);
}

template <typename T>
KernelTable<T> table() {
  return {
      .isa = "generic",
      .gelu_forward = generic::gelu_forward<T>,
      .gelu_backward = generic::gelu_backward<T>,
      .causal_softmax = generic::causal_softmax<T>,
      .tile_product = generic::tile_product<T>,
      .transpose = generic::transpose<T>,
      .xent_row = generic::xent_row<T>,
      .bn_row_sums = row_sums<T>,
      .bn_normalize_row = normalize_row<T>,
      .bn_mask_row = mask_row<T>,
      .bn_dx_row = dx_row<T>,
      .bn_blocked_sums = blocked_sums,
      .bn_blocked_affine = blocked_affine,
      .bn_blocked_normalize = blocked_normalize,
      .adam = adam<T>,
      .bias_add_rows = bias_add_rows<T>,
      .bias_sums = bias_sums<T>,
      .rms_row = generic::rms_row<T>,
      .rms_backward_row = generic::rms_backward_row<T>,
      .swiglu_row = generic::swiglu_row<T>,
      .swiglu_backward_row = generic::swiglu_backward_row<T>,
  };
}

}  // namespace

const KernelTable<float>& generic_f32_table() {
  static const KernelTable<float> t = table<float>();
  return t;
}

const KernelTable<double>& generic_f64_table() {
  static const KernelTable<double> t = table<double>();
  return t;
}

}  // namespace hpc::backend::cpu
