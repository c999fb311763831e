// The GPT-2 style transformer layers (Radford et al. 2019; nanoGPT's shapes
// and parameter names). Spec names and arguments:
//
//   embed(vocab, width, context)      [T] token ids → [T, C]: token + learned position embedding
//   ln(eps=1e-5)                      LayerNorm over the last dimension
//   attn(heads, layers=1)             causal multi-head self-attention on [T, C]
//   block(heads, layers=1, recompute=0)   pre-LN block: x + attn(ln(x)), then x + mlp(ln(x))
//   lm_head(vocab)                    [T, C] → [T, V] logits with the embedding's token matrix
//
// A gpt model is `embed block… ln lm_head` (spec.cpp's gpt presets). Every
// layer treats its input as B·T rows of C features, so projections are
// single GEMMs over the whole batch. `layers` is the model's depth: GPT-2
// initialises the projections that write into the residual stream with
// N(0, 0.02²/(2·layers)) so the stream's variance does not grow with depth.
// lm_head owns no parameter: its weight is tied to the embedding's token
// matrix (ParamSpec::tied_to), so the model learns one V×C matrix for both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/layer.h"

namespace hpc::nn {

class Embedding final : public Layer {
 public:
  explicit Embedding(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  // Token ids: float32 on a GPU whatever the weights' dtype (exact up to 2^24;
  // bf16 holds ids exactly only below 256, fp16 below 2048), and the GPU op
  // takes float32 ids. The CPU computes in float32 or float64, which carry them.
  DType input_dtype(DType dtype, Device device) const override {
    return device == Device::CPU ? dtype : DType::F32;
  }
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;

 private:
  std::string text_;
  int64_t vocab_ = 0, width_ = 0, context_ = 0;
  Tensor wte_, wpe_, dwte_, dwpe_;
};

class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  ActivationBytes activation_bytes(int64_t batch) const override;

  // backward that adds into dx instead of writing it (the block's residual paths).
  void backward_into(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate);
  void release_scratch() { mean_ = rstd_ = Tensor(); }

 private:
  std::string text_;
  double eps_ = 1e-5;
  int64_t width_ = 0, rows_per_sample_ = 0;
  DType dtype_ = DType::F32;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  Tensor mean_, rstd_;  // per row, from the last forward
};

class CausalSelfAttention final : public Layer {
 public:
  explicit CausalSelfAttention(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override;
  ActivationBytes activation_bytes(int64_t batch) const override;

  void release_scratch();

 private:
  std::string text_;
  int64_t heads_ = 1, layers_ = 1, context_ = 0, width_ = 0;
  DType dtype_ = DType::F32;
  Tensor w_qkv_, b_qkv_, w_proj_, b_proj_, dw_qkv_, db_qkv_, dw_proj_, db_proj_;
  Tensor qkv_, probs_, heads_out_;  // kept from forward for backward
  Tensor dqkv_, dheads_, dscores_;  // backward scratch
};

class GptBlock final : public Layer {
 public:
  explicit GptBlock(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override;
  ActivationBytes activation_bytes(int64_t batch) const override;

 private:
  // The forward pass into this block's scratch tensors; y may be undefined (recompute).
  void run_forward(const Tensor& x, const Tensor& y, const RunCtx& ctx);
  void release_scratch();
  int64_t forward_saved_bytes(int64_t batch) const;

  std::string text_;
  int64_t heads_ = 1, layers_ = 1, context_ = 0, width_ = 0;
  bool recompute_ = false;
  DType dtype_ = DType::F32;
  std::unique_ptr<LayerNorm> ln1_, ln2_;
  std::unique_ptr<CausalSelfAttention> attn_;
  Tensor w_fc_, b_fc_, w_out_, b_out_, dw_fc_, db_fc_, dw_out_, db_out_;
  Tensor a1_, att_, h1_, a2_, fc_, gelu_;  // forward intermediates (rows of the batch)
  Tensor dgelu_, da2_, dh1_, da1_;         // backward scratch
};

class TiedHead final : public Layer {
 public:
  explicit TiedHead(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override { return 2 * context_ * width_ * vocab_; }

 private:
  std::string text_;
  int64_t vocab_ = 0, width_ = 0, context_ = 0;
  Tensor weight_, dweight_;
};

}  // namespace hpc::nn
