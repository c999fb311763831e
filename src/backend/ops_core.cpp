// Device dispatch for the core ops. The CUDA backend adds its branches here
// when it lands; until then a CUDA tensor reaching an op is a clear error.
#include "backend/ops_core.h"

#include "backend/cpu/cpu_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

void unsupported_device(const char* op, const Tensor& t) {
  throw Error(EXIT_INTERNAL,
              std::string(op) + " is not implemented for " + device_name(t.device()) + " tensors");
}

#define HPC_CPU_ONLY(op, t) \
  if (!on_cpu(t)) unsupported_device(op, t)

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
          const Tensor& b, double beta, const Tensor& c) {
  HPC_CPU_ONLY("gemm", c);
  cpu::gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
}
void fill(const Tensor& t, double v) {
  HPC_CPU_ONLY("fill", t);
  cpu::fill(t, v);
}
void copy(const Tensor& src, const Tensor& dst) {
  HPC_CPU_ONLY("copy", dst);
  cpu::copy(src, dst);
}
void convert(const Tensor& src, const Tensor& dst) {
  HPC_CPU_ONLY("convert", dst);
  cpu::convert(src, dst);
}
void axpy(double alpha, const Tensor& x, const Tensor& y) {
  HPC_CPU_ONLY("axpy", y);
  cpu::axpy(alpha, x, y);
}
void scale(const Tensor& x, double alpha) {
  HPC_CPU_ONLY("scale", x);
  cpu::scale(x, alpha);
}
double sum_squares(const Tensor& x) {
  HPC_CPU_ONLY("sum_squares", x);
  return cpu::sum_squares(x);
}
double sum(const Tensor& x) {
  HPC_CPU_ONLY("sum", x);
  return cpu::sum(x);
}
void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial) {
  HPC_CPU_ONLY("add_bias", y);
  cpu::add_bias(y, bias, channels, spatial);
}
void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial) {
  HPC_CPU_ONLY("bias_grad", dy);
  cpu::bias_grad(dy, dbias, channels, spatial);
}

}  // namespace hpc::backend
