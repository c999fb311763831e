// Device dispatch for the transformer ops (ops_transformer.h). Only the CPU
// implements them so far; a GPU tensor gets a one-line UserError that says
// what to do instead of an internal error, since a user can reach it.
#include "backend/ops_transformer.h"

#include "backend/cpu/transformer_ops.h"
#include "backend/dispatch.h"

namespace hpc::backend {

namespace {
void require_cpu(const char* op, const Tensor& t) {
  if (!on_cpu(t))
    throw UserError(std::string("the transformer op ") + op +
                    " is not yet on the GPU: run the gpt models with --train.device cpu");
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y) {
  require_cpu("embedding_forward", y);
  cpu::embedding_forward(ids, wte, wpe, y);
}
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe) {
  require_cpu("embedding_backward", dy);
  cpu::embedding_backward(ids, dy, dwte, dwpe);
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  require_cpu("layernorm_forward", y);
  cpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
}
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta) {
  require_cpu("layernorm_backward", dy);
  cpu::layernorm_backward(x, dy, gamma, mean, rstd, dx, accumulate, dgamma, dbeta);
}

void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out) {
  require_cpu("attention_forward", out);
  cpu::attention_forward(qkv, heads, probs, out);
}
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        const Tensor& dqkv, const Tensor& scratch) {
  require_cpu("attention_backward", dqkv);
  cpu::attention_backward(qkv, probs, dout, heads, dqkv, scratch);
}

}  // namespace hpc::backend
