// Device dispatch for the core ops: CUDA tensors go to backend/cuda (the
// stubs of backend/nocuda in a CPU-only build), the rest to backend/cpu.
#include "backend/ops_core.h"

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

void unsupported_device(const char* op, const Tensor& t) {
  throw Error(EXIT_INTERNAL,
              std::string(op) + " is not implemented for " + device_name(t.device()) + " tensors");
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, const Tensor& b,
          double beta, const Tensor& c) {
  if (!on_cpu(c)) return cuda::gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  cpu::gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
}
void fill(const Tensor& t, double v) {
  if (!on_cpu(t)) return cuda::fill(t, v);
  cpu::fill(t, v);
}
void copy(const Tensor& src, const Tensor& dst) {
  if (!on_cpu(src) || !on_cpu(dst)) return cuda::copy(src, dst);
  cpu::copy(src, dst);
}
void copy_async(const Tensor& src, const Tensor& dst) {
  if (!on_cpu(dst)) return cuda::copy_async(src, dst);
  cpu::copy(src, dst);
}
void convert(const Tensor& src, const Tensor& dst) {
  if (!on_cpu(src) || !on_cpu(dst)) return cuda::convert(src, dst);
  cpu::convert(src, dst);
}
void axpy(double alpha, const Tensor& x, const Tensor& y) {
  if (!on_cpu(y)) return cuda::axpy(alpha, x, y);
  cpu::axpy(alpha, x, y);
}
void scale(const Tensor& x, double alpha) {
  if (!on_cpu(x)) return cuda::scale(x, alpha);
  cpu::scale(x, alpha);
}
double sum_squares(const Tensor& x) {
  if (!on_cpu(x)) return cuda::sum_squares(x);
  return cpu::sum_squares(x);
}
double sum(const Tensor& x) {
  if (!on_cpu(x)) return cuda::sum(x);
  return cpu::sum(x);
}
void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial) {
  if (!on_cpu(y)) return cuda::add_bias(y, bias, channels, spatial);
  cpu::add_bias(y, bias, channels, spatial);
}
void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial) {
  if (!on_cpu(dy)) return cuda::bias_grad(dy, dbias, channels, spatial);
  cpu::bias_grad(dy, dbias, channels, spatial);
}

}  // namespace hpc::backend
