// The transformer language models: GPT-2 (Radford et al. 2019; nanoGPT's
// shapes and parameter names) and Llama (Touvron et al. 2023: RMSNorm,
// rotary positions, SwiGLU, grouped-query attention, no biases). Spec names
// and arguments:
//
//   embed(vocab, width, context, positions=context)  [T] token ids → [T, C]: token
//                                     (+ learned position, positions=0: none) embedding
//   block(heads, kv_heads=heads, ffn=4·width, layers=1, recompute=0)
//                                     GPT-2's pre-LN block: x + attn(ln(x)), then x + mlp(ln(x))
//   llama_block(heads, kv_heads=heads, ffn=…, theta=10000, eps=1e-5, layers=1, recompute=0,
//               linear=F | llama3=F,low=1,high=4,orig=8192)
//                                     Llama's: RMSNorm, rotary attention, SwiGLU MLP
//   ln(eps) / rmsnorm(eps)            the final norm
//   lm_head(vocab, tied=1)            [T, C] → [T, V] logits; tied: with the embedding's token matrix
//
// and the pieces (transformer_pieces.h): attn, mlp, swiglu. A GPT is
// `embed block… ln lm_head`, a Llama `embed(…,positions=0) llama_block…
// rmsnorm lm_head(V,tied=0)` (spec.cpp's presets). Every layer treats its
// input as B·T rows of C features, so projections are single GEMMs over
// the whole batch. `layers` is the model's depth: the projections that write
// into the residual stream start with N(0, 0.02²/(2·layers)) (GPT-2's rule,
// used for both families) so the stream's variance does not grow with depth.
// Split over a tensor-parallel group (nn/tensor_parallel.h): embed and
// lm_head hold their rows of the vocabulary (padded to a multiple of 128·T),
// the block's pieces split by heads and ffn columns (transformer_pieces.h),
// the norms run replicated — with sequence parallelism on each rank's chunk
// of the rows, between an embed that reduce-scatters and an lm_head that
// all-gathers.
// A tied lm_head owns no parameter: its weight is the embedding's token
// matrix (ParamSpec::tied_to), so the model learns one V×C matrix for both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/layer.h"
#include "nn/layers/transformer_pieces.h"

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
  bool can_decode() const override { return !tp_.sequence_split(); }
  void decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) override;
  void set_split(const TpSplit& tp) override { tp_ = tp; }
  bool tensor_parallel() const override { return true; }

 private:
  std::string text_;
  int64_t vocab_ = 0, width_ = 0, context_ = 0, positions_ = 0;
  TpSplit tp_;
  VocabSplit split_;  // this rank's rows of the token matrix
  Tensor wte_, wpe_, dwte_, dwpe_;
  Tensor full_;  // sequence parallelism: the whole batch's rows before the reduce-scatter / after the gather
};

// One transformer block, written once for both families from the pieces:
//   h = x + attn(norm1(x));   y = h + mlp(norm2(h))
class TransformerBlock final : public Layer {
 public:
  enum class Family { Gpt, Llama };
  TransformerBlock(Family family, const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override;
  ActivationBytes activation_bytes(int64_t batch) const override;
  bool can_decode() const override { return true; }
  void start_decode(int64_t max_positions) override { attn_->start_decode(max_positions); }
  void decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) override;
  void set_split(const TpSplit& tp) override { tp_ = tp; }
  bool tensor_parallel() const override { return true; }

 private:
  // The forward pass into this block's scratch tensors; y may be undefined (recompute).
  void run_forward(const Tensor& x, const Tensor& y, const RunCtx& ctx);
  void release_scratch();
  int64_t forward_saved_bytes(int64_t batch) const;

  std::string text_;
  Family family_;
  int64_t heads_ = 1, kv_heads_ = 0, ffn_ = 0, layers_ = 1, context_ = 0, width_ = 0;
  double eps_ = 1e-5;
  RotaryConfig rotary_;
  bool recompute_ = false;
  DType dtype_ = DType::F32;
  TpSplit tp_;
  std::unique_ptr<RowNorm> norm1_, norm2_;
  std::unique_ptr<Attention> attn_;
  std::unique_ptr<Mlp> mlp_;
  Tensor a1_, h1_, a2_;     // forward intermediates (rows of the batch)
  Tensor da2_, dh1_, da1_;  // backward scratch
};

// The output projection to logits. Spec: lm_head(vocab, tied=1).
class LmHead final : public Layer {
 public:
  explicit LmHead(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override { return 2 * context_ * width_ * split_.shard; }
  bool can_decode() const override { return !tp_.sequence_split(); }
  void set_split(const TpSplit& tp) override { tp_ = tp; }
  bool tensor_parallel() const override { return true; }
  VocabSplit output_vocab() const override;

 private:
  Tensor input_rows(const Tensor& x, const RunCtx& ctx);

  std::string text_;
  int64_t vocab_ = 0, width_ = 0, context_ = 0;
  bool tied_ = true;
  TpSplit tp_;
  VocabSplit split_;  // the logits' columns this rank computes
  Tensor weight_, dweight_;
  Tensor x_full_, dx_full_;  // sequence parallelism: the gathered input rows and their gradient
};

}  // namespace hpc::nn
