// CUDA ops of the Llama pieces (ops.def): shape checks, scratch, and the
// launches of kernels/llama.cuh. Same contracts as the CPU ops
// (backend/cpu/llama_ops.cpp); bf16 and fp16 compute in float.
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/llama.cuh"
#include "kernels/transformer_math.h"

namespace hpc::backend::cuda {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  require_device("rmsnorm_forward", {&x, &weight, &y, &rstd});
  const int64_t c = weight.count(), rows = x.count() / c;
  HPC_ASSERT(y.count() == x.count() && rows * c == x.count() && rstd.count() >= rows,
             "rmsnorm_forward: shapes");
  dispatch_storage(y.dtype(), "rmsnorm_forward", [&]<typename T>() {
    const char* op = "rmsnorm_forward";
    kernels::rmsnorm_forward(ptr<T>(x, op), ptr<T>(weight, op), eps, ptr<T>(y, op), ptr<T>(rstd, op), rows, c,
                             Context::get().compute());
  });
}

void rmsnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, bool accumulate, const Tensor& dweight) {
  require_device("rmsnorm_backward", {&x, &dy, &weight, &rstd, &dx, &dweight});
  const int64_t c = weight.count(), rows = x.count() / c;
  HPC_ASSERT(dy.count() == x.count() && (!dx.defined() || dx.count() == x.count()) && rstd.count() >= rows,
             "rmsnorm_backward: shapes");
  Context& ctx = Context::get();
  auto* partials =
      static_cast<double*>(ctx.scratch(size_t(kernels::layernorm_param_splits(rows)) * size_t(c) * 8));
  dispatch_storage(dy.dtype(), "rmsnorm_backward", [&]<typename T>() {
    const char* op = "rmsnorm_backward";
    kernels::rmsnorm_backward(ptr<T>(x, op), ptr<T>(dy, op), ptr<T>(weight, op), ptr<T>(rstd, op),
                              ptr<T>(dx, op), accumulate, ptr<T>(dweight, op), partials, rows, c,
                              ctx.compute());
  });
}

void rotary_apply(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& cos, const Tensor& sin,
                  bool interleaved, bool inverse) {
  require_device("rotary_apply", {&qkv, &cos, &sin});
  HPC_ASSERT(heads > 0 && kv_heads > 0 && qkv.shape().rank() == 3, "rotary_apply: shapes");
  const int64_t t_len = qkv.shape()[1], w = qkv.shape()[2], d = w / (heads + 2 * kv_heads);
  HPC_ASSERT(w == (heads + 2 * kv_heads) * d && d % 2 == 0 && cos.shape()[1] == d / 2 &&
                 sin.shape() == cos.shape() && cos.shape()[0] >= t_len,
             "rotary_apply: shapes");
  dispatch_storage(qkv.dtype(), "rotary_apply", [&]<typename T>() {
    const char* op = "rotary_apply";
    kernels::rotary_apply(ptr<T>(qkv, op), qkv.shape()[0] * t_len, t_len, heads, kv_heads, d, ptr<T>(cos, op),
                          ptr<T>(sin, op), interleaved, inverse, Context::get().compute());
  });
}

void swiglu_forward(const Tensor& gate_up, const Tensor& out) {
  require_device("swiglu_forward", {&gate_up, &out});
  const int64_t f = out.shape()[out.shape().rank() - 1], rows = out.count() / f;
  HPC_ASSERT(gate_up.count() == 2 * out.count(), "swiglu_forward: shapes");
  dispatch_storage(out.dtype(), "swiglu_forward", [&]<typename T>() {
    kernels::swiglu_forward(ptr<T>(gate_up, "swiglu_forward"), ptr<T>(out, "swiglu_forward"), rows, f,
                            Context::get().compute());
  });
}

void swiglu_backward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  require_device("swiglu_backward", {&gate_up, &dout, &dgate_up});
  const int64_t f = dout.shape()[dout.shape().rank() - 1], rows = dout.count() / f;
  HPC_ASSERT(gate_up.count() == 2 * dout.count() && dgate_up.count() == gate_up.count(),
             "swiglu_backward: shapes");
  dispatch_storage(dgate_up.dtype(), "swiglu_backward", [&]<typename T>() {
    const char* op = "swiglu_backward";
    kernels::swiglu_backward(ptr<T>(gate_up, op), ptr<T>(dout, op), ptr<T>(dgate_up, op), rows, f,
                             Context::get().compute());
  });
}

}  // namespace hpc::backend::cuda
