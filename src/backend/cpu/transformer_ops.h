// CPU implementations of the transformer ops (ops_transformer.h). Same contracts.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hpc::backend::cpu {

void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y);
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe);
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta);
void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out);
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        const Tensor& dqkv, const Tensor& scratch);

}  // namespace hpc::backend::cpu
