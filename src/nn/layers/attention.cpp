// Causal multi-head self-attention (Vaswani et al. 2017, GPT-2's masked
// variant): one GEMM projects every token of the batch to [q | k | v]
// (GPT-2's c_attn layout, heads side by side), backend::attention_forward
// does softmax(q·kᵀ/√d) with the causal mask per (sample, head), and one
// GEMM projects the heads' outputs back (c_proj, a residual projection:
// initialised with the 1/√(2·layers) scale).
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer.h"

namespace hpc::nn {

CausalSelfAttention::CausalSelfAttention(const LayerArgs& args) {
  ArgReader r(args, {"heads", "layers"});
  text_ = r.text();
  heads_ = r.required_int("heads", 1);
  layers_ = r.int_or("layers", 1, 1);
  r.finish();
}

std::string CausalSelfAttention::spec() const {
  return "attn(" + std::to_string(heads_) + (layers_ == 1 ? "" : ",layers=" + std::to_string(layers_)) + ")";
}

Shape CausalSelfAttention::build(const Shape& in, DType dtype) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  if (width_ % heads_ != 0)
    throw_layer_error(text_, "the width " + std::to_string(width_) + " is not a multiple of the " +
                                 std::to_string(heads_) + " heads");
  dtype_ = dtype;
  return in;
}

std::vector<ParamSpec> CausalSelfAttention::param_specs() const {
  const int64_t c = width_;
  ParamSpec proj{"proj.weight", Shape{c, c}, Init::Normal002, c, c, true};
  proj.init_scale = 1.0 / std::sqrt(2.0 * double(layers_));
  return {{"qkv.weight", Shape{3 * c, c}, Init::Normal002, c, 3 * c, true},
          {"qkv.bias", Shape{3 * c}, Init::Zeros, c, 3 * c, false},
          proj,
          {"proj.bias", Shape{c}, Init::Zeros, c, c, false}};
}

void CausalSelfAttention::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 4 && grads.size() == 4, "attn: bind count");
  w_qkv_ = params[0], b_qkv_ = params[1], w_proj_ = params[2], b_proj_ = params[3];
  dw_qkv_ = grads[0], db_qkv_ = grads[1], dw_proj_ = grads[2], db_proj_ = grads[3];
}

int64_t CausalSelfAttention::forward_flops() const {
  const int64_t t = context_, c = width_;
  return 2 * t * c * 3 * c + 4 * t * t * c + 2 * t * c * c;  // qkv, q·kᵀ and p·v (full T×T), proj
}

ActivationBytes CausalSelfAttention::activation_bytes(int64_t batch) const {
  const int64_t b =
      batch * (4 * context_ * width_ + heads_ * context_ * context_) * int64_t(dtype_size(dtype_));
  return {b, b, b};
}

void CausalSelfAttention::release_scratch() {
  qkv_ = probs_ = heads_out_ = Tensor();
  dqkv_ = dheads_ = dscores_ = Tensor();
}

void CausalSelfAttention::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t n = x.shape()[0], rows = n * context_, c = width_;
  const Device dev = x.device();
  const Tensor qkv = scratch(qkv_, Shape{n, context_, 3 * c}, dtype_, dev);
  const Tensor probs = scratch(probs_, Shape{n, heads_, context_, context_}, dtype_, dev);
  const Tensor heads = scratch(heads_out_, Shape{n, context_, c}, dtype_, dev);
  backend::gemm(false, true, rows, 3 * c, c, 1.0, x, w_qkv_, 0.0, qkv);
  backend::add_bias(qkv, b_qkv_, 3 * c, 1);
  backend::attention_forward(qkv, heads_, probs, heads);
  backend::gemm(false, true, rows, c, c, 1.0, heads, w_proj_, 0.0, y);
  backend::add_bias(y, b_proj_, c, 1);
}

void CausalSelfAttention::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx,
                                   const RunCtx&) {
  const int64_t n = x.shape()[0], rows = n * context_, c = width_;
  const Device dev = x.device();
  HPC_ASSERT(qkv_.defined() && qkv_.count() >= rows * 3 * c, "attn: backward before forward");
  const Tensor qkv = qkv_.slice(0, Shape{n, context_, 3 * c});
  const Tensor probs = probs_.slice(0, Shape{n, heads_, context_, context_});
  const Tensor heads = heads_out_.slice(0, Shape{n, context_, c});
  const Tensor dheads = scratch(dheads_, Shape{n, context_, c}, dtype_, dev);
  const Tensor dqkv = scratch(dqkv_, Shape{n, context_, 3 * c}, dtype_, dev);
  const Tensor dscores = scratch(dscores_, Shape{context_, context_}, dtype_, dev);

  backend::gemm(true, false, c, c, rows, 1.0, dy, heads, 1.0, dw_proj_);  // dWproj += dyᵀ·heads
  backend::bias_grad(dy, db_proj_, c, 1);
  backend::gemm(false, false, rows, c, c, 1.0, dy, w_proj_, 0.0, dheads);
  backend::attention_backward(qkv, probs, dheads, heads_, dqkv, dscores);
  backend::gemm(true, false, 3 * c, c, rows, 1.0, dqkv, x, 1.0, dw_qkv_);  // dWqkv += dqkvᵀ·x
  backend::bias_grad(dqkv, db_qkv_, 3 * c, 1);
  if (dx.defined()) backend::gemm(false, false, rows, c, 3 * c, 1.0, dqkv, w_qkv_, 0.0, dx);
}

}  // namespace hpc::nn
