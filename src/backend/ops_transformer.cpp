// Device dispatch for the transformer ops (ops_transformer.h): CPU tensors go
// to cpu/transformer_ops.cpp, CUDA tensors to cuda/transformer_ops.cpp (the
// stubs of nocuda/ in a build without CUDA, which never has CUDA tensors).
#include "backend/ops_transformer.h"

#include "backend/cpu/transformer_ops.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y) {
  if (!on_cpu(y)) return cuda::embedding_forward(ids, wte, wpe, y);
  cpu::embedding_forward(ids, wte, wpe, y);
}
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe) {
  if (!on_cpu(dy)) return cuda::embedding_backward(ids, dy, dwte, dwpe);
  cpu::embedding_backward(ids, dy, dwte, dwpe);
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  if (!on_cpu(y)) return cuda::layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
  cpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
}
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta) {
  if (!on_cpu(dy)) return cuda::layernorm_backward(x, dy, gamma, mean, rstd, dx, accumulate, dgamma, dbeta);
  cpu::layernorm_backward(x, dy, gamma, mean, rstd, dx, accumulate, dgamma, dbeta);
}

void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out) {
  if (!on_cpu(out)) return cuda::attention_forward(qkv, heads, probs, out);
  cpu::attention_forward(qkv, heads, probs, out);
}
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        const Tensor& dqkv, const Tensor& scratch) {
  if (!on_cpu(dqkv)) return cuda::attention_backward(qkv, probs, dout, heads, dqkv, scratch);
  cpu::attention_backward(qkv, probs, dout, heads, dqkv, scratch);
}

}  // namespace hpc::backend
