// CPU core ops (ops.def): OpenBLAS for GEMM (oneDNN's matmul for the float32
// shapes where it measured faster: cpu/onednn.h), plain loops (auto-vectorised
// at -O3) for the rest, the bias loops from the kernel table (isa/kernel_table.h,
// where they have AVX-512 bodies). Reductions accumulate in double so that a
// global gradient norm does not depend on the summation order more than it must.
#include <cblas.h>

#include <cstring>
#include <vector>

#include "backend/cpu/isa/generic.h"
#include "backend/cpu/isa/kernel_table.h"
#include "backend/cpu/onednn.h"
#include "backend/dispatch.h"
#include "backend/ops_impl.h"

namespace hpc::backend::cpu {

namespace {

void check_same_count(const Tensor& a, const Tensor& b, const char* op) {
  HPC_ASSERT(a.count() == b.count() && a.channel_block() == b.channel_block(),
             std::string(op) + ": " + a.shape().str() + " vs " + b.shape().str() + " (or layouts)");
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, const Tensor& b,
          double beta, const Tensor& c) {
  HPC_ASSERT(a.dtype() == c.dtype() && b.dtype() == c.dtype(), "gemm: mixed dtypes");
  HPC_ASSERT(a.count() >= m * k && b.count() >= k * n && c.count() >= m * n, "gemm: operand too small");
  if (m == 0 || n == 0) return;
  const auto op_a = ta ? CblasTrans : CblasNoTrans;
  const auto op_b = tb ? CblasTrans : CblasNoTrans;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n), ldc = static_cast<int>(n);
  if (c.dtype() == DType::F32 && onednn::matmul_wins(m, n, k))
    onednn::matmul(ta, tb, m, n, k, float(alpha), a.data<float>(), b.data<float>(), float(beta),
                   c.data<float>());
  else if (c.dtype() == DType::F32)
    cblas_sgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), float(alpha), a.data<float>(), lda,
                b.data<float>(), ldb, float(beta), c.data<float>(), ldc);
  else if (c.dtype() == DType::F64)
    cblas_dgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), alpha, a.data<double>(), lda,
                b.data<double>(), ldb, beta, c.data<double>(), ldc);
  else
    HPC_ASSERT(false, std::string("gemm: unsupported dtype ") + dtype_name(c.dtype()));
}

void fill(const Tensor& t, double value) {
  dispatch_float(t.dtype(), "fill", [&]<typename T>() {
    T* p = t.data<T>();
    const T v = static_cast<T>(value);
    const int64_t n = t.count();
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void copy(const Tensor& src, const Tensor& dst) {
  check_same_count(src, dst, "copy");
  HPC_ASSERT(src.dtype() == dst.dtype(), "copy: dtypes differ (use convert)");
  HPC_ASSERT(src.device() == Device::CPU, "copy: device source needs the CUDA backend");
  if (src.raw() != dst.raw()) std::memmove(dst.raw(), src.raw(), src.num_bytes());
}

// Host to host there is nothing to overlap: a plain copy.
void copy_async(const Tensor& src, const Tensor& dst) { copy(src, dst); }

void convert(const Tensor& src, const Tensor& dst) {
  check_same_count(src, dst, "convert");
  dispatch_float(dst.dtype(), "convert", [&]<typename T>() {
    T* out = dst.data<T>();
    const int64_t n = src.count();
    switch (src.dtype()) {
      case DType::F32:
        for (int64_t i = 0; i < n; ++i) out[i] = T(src.data<float>()[i]);
        break;
      case DType::F64:
        for (int64_t i = 0; i < n; ++i) out[i] = T(src.data<double>()[i]);
        break;
      case DType::U8:
        for (int64_t i = 0; i < n; ++i) out[i] = T(src.data<uint8_t>()[i]);
        break;
      case DType::I32:
        for (int64_t i = 0; i < n; ++i) out[i] = T(src.data<int32_t>()[i]);
        break;
      default:
        HPC_ASSERT(false, std::string("convert from ") + dtype_name(src.dtype()));
    }
  });
}

void axpy(double alpha, const Tensor& x, const Tensor& y) {
  check_same_count(x, y, "axpy");
  dispatch_float(y.dtype(), "axpy", [&]<typename T>() {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T a = static_cast<T>(alpha);
    const int64_t n = y.count();
    for (int64_t i = 0; i < n; ++i) yp[i] += a * xp[i];
  });
}

void scale(const Tensor& x, double alpha) {
  dispatch_float(x.dtype(), "scale", [&]<typename T>() {
    T* p = x.data<T>();
    const T a = static_cast<T>(alpha);
    const int64_t n = x.count();
    for (int64_t i = 0; i < n; ++i) p[i] *= a;
  });
}

double sum_squares(const Tensor& x) {
  return dispatch_float(x.dtype(), "sum_squares", [&]<typename T>() {
    return generic::reduce16(x.data<T>(), x.count(), [](double v) { return v * v; });
  });
}

double sum(const Tensor& x) {
  return dispatch_float(x.dtype(), "sum", [&]<typename T>() {
    return generic::reduce16(x.data<T>(), x.count(), [](double v) { return v; });
  });
}

void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial) {
  HPC_ASSERT(bias.count() == channels && y.count() % (channels * spatial) == 0, "add_bias: shapes");
  dispatch_float(y.dtype(), "add_bias", [&]<typename T>() {
    kernel_table<T>().bias_add_rows(y.data<T>(), bias.data<T>(), y.count() / (channels * spatial), channels,
                                    spatial);
  });
}

void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial) {
  HPC_ASSERT(dbias.count() == channels && dy.count() % (channels * spatial) == 0, "bias_grad: shapes");
  dispatch_float(dy.dtype(), "bias_grad", [&]<typename T>() {
    std::vector<double> acc(static_cast<size_t>(channels), 0.0);  // per channel in double
    kernel_table<T>().bias_sums(dy.data<T>(), acc.data(), dy.count() / (channels * spatial), channels,
                                spatial);
    T* db = dbias.data<T>();
    for (int64_t c = 0; c < channels; ++c) db[c] += static_cast<T>(acc[static_cast<size_t>(c)]);
  });
}

}  // namespace hpc::backend::cpu
