// CPU ops of the Llama pieces (ops.def): RMSNorm rows, rotary position
// embeddings and the SwiGLU gate. RMSNorm and SwiGLU run the kernel table's
// rows (isa/kernel_table.h: float32 vectorised per instruction set, every
// table the generic loops' bits; float64 — the gradient checks, the exact
// path of the PyTorch comparisons — the generic loops with std::exp).
// Rotary is kernels/llama_math.h's per-pair function, the CUDA kernel's own
// arithmetic: written with explicit fma over two contiguous halves of a head,
// it vectorises as it is.
#include "backend/ops_impl.h"

#include <cmath>
#include <string>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/dispatch.h"
#include "kernels/llama_math.h"

namespace hpc::backend::cpu {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  const int64_t c = weight.count(), rows = x.count() / c;
  HPC_ASSERT(y.count() == x.count() && rows * c == x.count() && rstd.count() >= rows,
             "rmsnorm_forward: shapes");
  dispatch_float(y.dtype(), "rmsnorm_forward", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    for (int64_t r = 0; r < rows; ++r)
      rstd.data<T>()[r] = k.rms_row(x.data<T>() + r * c, weight.data<T>(), c, eps, y.data<T>() + r * c);
  });
}

void rmsnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, bool accumulate, const Tensor& dweight) {
  const int64_t c = weight.count(), rows = x.count() / c;
  HPC_ASSERT(dy.count() == x.count() && (!dx.defined() || dx.count() == x.count()) && rstd.count() >= rows,
             "rmsnorm_backward: shapes");
  dispatch_float(dy.dtype(), "rmsnorm_backward", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    for (int64_t r = 0; r < rows; ++r)  // rows in order: dweight's sums are the same every run
      k.rms_backward_row(x.data<T>() + r * c, dy.data<T>() + r * c, weight.data<T>(), rstd.data<T>()[r], c,
                         dx.defined() ? dx.data<T>() + r * c : nullptr, accumulate, dweight.data<T>());
  });
}

void rotary_apply(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& cos, const Tensor& sin,
                  bool interleaved, bool inverse) {
  HPC_ASSERT(heads > 0 && kv_heads > 0 && qkv.shape().rank() == 3, "rotary_apply: shapes");
  const int64_t t_len = qkv.shape()[1], c3 = qkv.shape()[2], d = c3 / (heads + 2 * kv_heads), half = d / 2;
  const int64_t rows = qkv.shape()[0] * t_len;
  HPC_ASSERT(c3 == (heads + 2 * kv_heads) * d && d % 2 == 0 && cos.shape()[1] == half &&
                 sin.shape() == cos.shape() && cos.shape()[0] >= t_len,
             "rotary_apply: shapes");
  dispatch_float(qkv.dtype(), "rotary_apply", [&]<typename T>() {
    const T *ct = cos.data<T>(), *st = sin.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* c_row = ct + (r % t_len) * half;
      const T* s_row = st + (r % t_len) * half;
      for (int64_t h = 0; h < heads + kv_heads; ++h) {
        T* x = qkv.data<T>() + r * c3 + h * d;
        if (interleaved) {
          for (int64_t i = 0; i < half; ++i)
            kernels::rotary_pair(x[2 * i], x[2 * i + 1], c_row[i], s_row[i], inverse);
        } else {
          T* y = x + half;
          for (int64_t i = 0; i < half; ++i) kernels::rotary_pair(x[i], y[i], c_row[i], s_row[i], inverse);
        }
      }
    }
  });
}

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  const int64_t f = out.shape()[out.shape().rank() - 1], rows = out.count() / f;
  HPC_ASSERT(gate_up.count() == 2 * out.count(), "swiglu_forward: shapes");
  dispatch_float(out.dtype(), "swiglu_forward", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* g = gate_up.data<T>() + r * 2 * f;
      k.swiglu_row(g, g + f, out.data<T>() + r * f, f);
    }
  });
}

void swiglu_backward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  const int64_t f = dout.shape()[dout.shape().rank() - 1], rows = dout.count() / f;
  HPC_ASSERT(gate_up.count() == 2 * dout.count() && dgate_up.count() == gate_up.count(),
             "swiglu_backward: shapes");
  dispatch_float(dgate_up.dtype(), "swiglu_backward", [&]<typename T>() {
    const KernelTable<T>& k = kernel_table<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* g = gate_up.data<T>() + r * 2 * f;
      T* dg = dgate_up.data<T>() + r * 2 * f;
      k.swiglu_backward_row(g, g + f, dout.data<T>() + r * f, dg, dg + f, f);
    }
  });
}

}  // namespace hpc::backend::cpu
