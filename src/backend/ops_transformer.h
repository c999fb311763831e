// Transformer backend ops: token + position embedding, LayerNorm over the
// last dimension, and causal multi-head self-attention.
//
// Same conventions as ops_nn.h: tensors carry the batch dimension, dispatch
// is on device and dtype (float32 for training, float64 for gradient
// checks), outputs are written unless a comment says "+=". Parameter
// gradients are always accumulated ("+="), like every layer's.
//
// On the GPU (cuda/transformer_ops.cpp) the dtypes are also bfloat16 and
// float16, token ids may be any float dtype or int32, and an id a 16-bit
// dtype cannot carry exactly is a UserError like an out-of-range one.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace hpc::backend {

// ---- embedding ------------------------------------------------------------

// y[b, t, :] = wte[ids[b, t], :] + wpe[t, :]. ids [B, T] hold token ids as
// exact integers in the model's float dtype (datasets hand every model float
// x); an id outside [0, V) is a UserError naming it. wte [V, C], wpe [≥T, C].
void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y);
// dwte[ids[b, t]] += dy[b, t]; dwpe[t] += Σ_b dy[b, t].
void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe);

// ---- layer normalisation ------------------------------------------------------

// Rows of x [R, C] (any leading shape, C = gamma.count()):
// y = gamma·(x − mean)·rstd + beta with the biased variance, rstd = 1/√(var + eps).
// mean and rstd [R] are written for backward (in x's dtype; the row sums are double).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = gamma·dy, x̂ = (x − mean)·rstd;
// written, or added into dx when accumulate (a residual branch adds its
// gradient to the skip path's). dgamma += Σ dy·x̂, dbeta += Σ dy.
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta);

// ---- causal self-attention ------------------------------------------------------

// qkv [B, T, 3C]: per token the query, key and value vectors side by side,
// each C = heads·d wide with head h in columns [h·d, (h+1)·d) (GPT-2's
// c_attn layout). probs [B, H, T, T] is written with the attention weights:
// softmax over s ≤ t of q_t·k_s/√d, exactly 0 for s > t (the causal mask),
// max-subtracted so no exp overflows. out [B, T, C] = heads' P·V side by side.
void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& probs, const Tensor& out);
// dqkv [B, T, 3C] is written from dout [B, T, C]. scratch holds one T×T
// matrix (dP) per call, reused.
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        const Tensor& dqkv, const Tensor& scratch);

}  // namespace hpc::backend
