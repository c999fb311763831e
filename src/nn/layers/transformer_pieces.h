// The pieces a transformer block is made of, shared by both families
// (GPT-2 and Llama): a row norm (LayerNorm or RMSNorm), causal self-attention
// (optionally grouped-query, optionally rotary) and an MLP (GELU or SwiGLU).
// Each piece is a Layer of its own (spec names ln, rmsnorm, attn, mlp,
// swiglu) so that it is gradient-checked alone, and a block
// (transformer_block.cpp) is only their composition.
//
// Tensor parallelism (Megatron-LM's scheme) splits these pieces, not the
// block: the attention's q/k/v projection and the MLP's first projection(s)
// by columns (whole heads, whole kv heads, ffn columns), the output
// projections (attn.proj, mlp.proj / mlp.down) by rows. Every width such a
// split changes derives from AttnDims / the ffn width, here, in one place;
// each projection is its own parameter (GPT-2's packed c_attn being the one
// stored as one matrix, for its checkpoints), and where two parameters feed
// one GEMM (q|k|v, gate|up) they are adjacent in the flat buffer and joined
// as a view (Tensor::joined), so a rank's shard of each is still adjacent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/llama_math.h"
#include "nn/layer.h"

namespace hpc::nn {

// ---- tensor parallelism --------------------------------------------------------------

// The collectives around a pair of split projections (Megatron-LM's f and g;
// with sequence parallelism Korthikanti et al.'s all-gather and
// reduce-scatter), on a piece's [rows, width] activations. The first
// projection is split by output columns: it reads every row of the input
// (in(): x, or with sequence parallelism the group's chunks gathered, kept
// for backward), and its input gradient is a partial sum over the group
// (reduce_input_grad). The second is split by input columns: its output is
// a partial sum (out() gives the tensor to write it into, reduce_output()
// reduces it into y), and its output gradient is every row's (out_grad()).
// Unsplit, every call is the identity on the tensors it is given.
class TpRows {
 public:
  void configure(const TpSplit& tp, int64_t width) { tp_ = tp, width_ = width; }
  // The rows of this rank's input x the group's projections read (kept until the next in()).
  Tensor in(const Tensor& x, const RunCtx& ctx);
  Tensor kept_in(const Tensor& x) const;  // the last in()'s rows, in backward
  // Where the row-split projection writes y's partial sum, and the reduction of it into y.
  Tensor out(const Tensor& y);
  void reduce_output(const Tensor& y, const RunCtx& ctx);
  // The gradient of every row of the output from dy (this rank's rows under sequence parallelism).
  Tensor out_grad(const Tensor& dy, const RunCtx& ctx);
  // Where the column-split projection writes dx's partial sum, and the reduction of it into dx.
  Tensor in_grad(const Tensor& dx);
  void reduce_input_grad(const Tensor& dx, const RunCtx& ctx);
  // The rows of every rank for `local` rows of this one.
  int64_t all_rows(int64_t local) const { return tp_.sequence_split() ? local * tp_.size : local; }
  void release() { x_ = y_ = dy_ = dx_ = Tensor(); }

 private:
  TpComm& comm(const RunCtx& ctx) const;
  Shape rows_of(const Tensor& t) const { return Shape{all_rows(t.count() / width_), width_}; }

  TpSplit tp_;
  int64_t width_ = 0;
  Tensor x_, y_, dy_, dx_;  // sequence parallelism: the gathered (or to-be-scattered) rows
};

// ---- dimensions ------------------------------------------------------------------

// An attention's widths, all from the head counts: query head h reads key
// and value head h / group().
struct AttnDims {
  int64_t heads = 1, kv_heads = 1, head_dim = 0;
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
  int64_t group() const { return heads / kv_heads; }
};

// Rotary position embeddings: theta 0 means none (GPT-2's learned positions).
struct RotaryConfig {
  double theta = 0;
  kernels::RopeScaling scaling;
  bool enabled() const { return theta > 0; }
};

// The cos and sin tables [positions, head_dim/2] of a rotary config, in a
// dtype on a device, grown on demand (decoding runs past the window).
class RotaryTables {
 public:
  void configure(const RotaryConfig& cfg, int64_t head_dim) { cfg_ = cfg, head_dim_ = head_dim; }
  // Tables covering positions [0, positions) (and possibly more) in `dtype` on `device`.
  void ensure(int64_t positions, DType dtype, Device device);
  // Rows [from, from + count) of the tables (row p: position p).
  Tensor cos(int64_t from, int64_t count) const;
  Tensor sin(int64_t from, int64_t count) const;

 private:
  RotaryConfig cfg_;
  int64_t head_dim_ = 0, rows_ = 0;
  Tensor cos_, sin_;
};

// ---- norms --------------------------------------------------------------------------

// A norm over the last dimension of rows, as the block uses it: backward
// may add into dx (the residual's skip path already holds its gradient).
// In a tensor-parallel model it runs replicated on every rank of the group
// (the same rows, the same bits), or with sequence parallelism on this
// rank's chunk of the rows: then its parameters' gradients are partial.
class RowNorm : public Layer {
 public:
  virtual void backward_into(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) = 0;
  virtual void release_scratch() = 0;
  bool can_decode() const override { return true; }
  void backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) override {
    backward_into(x, dy, dx, false);
  }
  void set_split(const TpSplit& tp) override { partial_ = tp.sequence_split(); }
  bool tensor_parallel() const override { return true; }

 protected:
  // specs marked ParamSpec::tp_partial when the norm sees only this rank's rows.
  std::vector<ParamSpec> partial_over_group(std::vector<ParamSpec> specs) const {
    for (ParamSpec& p : specs) p.tp_partial = partial_;
    return specs;
  }

 private:
  bool partial_ = false;
};

// LayerNorm (Ba et al. 2016): gamma and beta, eps default 1e-5. Spec: ln(eps=1e-5).
class LayerNorm final : public RowNorm {
 public:
  explicit LayerNorm(const LayerArgs& args);
  LayerNorm(double eps, std::string text) : text_(std::move(text)), eps_(eps) {}
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward_into(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) override;
  void release_scratch() override { mean_ = rstd_ = Tensor(); }
  ActivationBytes activation_bytes(int64_t batch) const override;

 private:
  std::string text_;
  double eps_ = 1e-5;
  int64_t width_ = 0, rows_per_sample_ = 0;
  DType dtype_ = DType::F32;
  Tensor gamma_, beta_, dgamma_, dbeta_;
  Tensor mean_, rstd_;  // per row, from the last forward
};

// RMSNorm (Zhang & Sennrich 2019), Llama's: y = weight·x/√(mean(x²) + eps).
// Spec: rmsnorm(eps=1e-5).
class RmsNorm final : public RowNorm {
 public:
  explicit RmsNorm(const LayerArgs& args);
  RmsNorm(double eps, std::string text) : text_(std::move(text)), eps_(eps) {}
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward_into(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) override;
  void release_scratch() override { rstd_ = Tensor(); }
  ActivationBytes activation_bytes(int64_t batch) const override;

 private:
  std::string text_;
  double eps_ = 1e-5;
  int64_t width_ = 0, rows_per_sample_ = 0;
  DType dtype_ = DType::F32;
  Tensor weight_, dweight_, rstd_;
};

// ---- attention ---------------------------------------------------------------------

struct AttnConfig {
  int64_t heads = 1, kv_heads = 0;  // kv_heads 0: heads (multi-head)
  bool bias = true;                 // GPT-2: biases, and q|k|v stored as one "qkv" matrix (c_attn)
  RotaryConfig rotary;
  int64_t layers = 1;  // the model's depth: proj's init scale 1/√(2·layers)
};

// Causal self-attention on [T, C] rows. Spec:
//   attn(heads, kv_heads=heads, theta=0, bias=1, layers=1, linear=F | llama3=F,low=,high=,orig=)
// bias=1 is GPT-2's attention (parameters qkv.weight, qkv.bias, proj.weight,
// proj.bias); bias=0 is Llama's (q.weight, k.weight, v.weight, proj.weight).
class Attention final : public Layer {
 public:
  explicit Attention(const LayerArgs& args);
  Attention(const AttnConfig& cfg, std::string text) : text_(std::move(text)), cfg_(cfg) {}
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
  void start_decode(int64_t max_positions) override;
  void decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) override;

  void set_split(const TpSplit& tp) override { tp_ = tp; }
  bool tensor_parallel() const override { return true; }

  const AttnDims& dims() const { return dims_; }  // this rank's heads (all of them unsplit)
  void release_scratch();

 private:
  std::string text_;
  AttnConfig cfg_;
  TpSplit tp_;
  AttnDims full_, dims_;  // the unsplit attention's widths and this rank's part (whole heads)
  int64_t context_ = 0, width_ = 0;
  DType dtype_ = DType::F32;
  RotaryTables rotary_;
  Tensor w_qkv_, b_qkv_, w_proj_, b_proj_, dw_qkv_, db_qkv_, dw_proj_, db_proj_;  // w_qkv_: q|k|v joined
  Tensor qkv_, probs_, heads_out_;  // kept from forward for backward (qkv after rotary)
  Tensor dqkv_, dheads_, dscores_;  // backward scratch
  TpRows rows_;                     // the group's rows around the split projections
  Tensor k_cache_, v_cache_;        // decoding
  int64_t cache_rows_ = 0;
};

// ---- MLP -------------------------------------------------------------------------------

// The position-wise MLP on [T, C] rows. Spec: mlp(ffn, layers=1) — GPT-2's
// fc, GELU (tanh), proj, with biases — or swiglu(ffn, layers=1) — Llama's
// gate, up, down without biases, out = down(silu(gate(x))·up(x)). The output
// projection writes into the residual stream: init scale 1/√(2·layers).
class Mlp final : public Layer {
 public:
  enum class Kind { Gelu, SwiGlu };
  Mlp(Kind kind, const LayerArgs& args);
  Mlp(Kind kind, int64_t ffn, int64_t layers, std::string text)
      : text_(std::move(text)), kind_(kind), ffn_(ffn), layers_(layers) {}
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
  void set_split(const TpSplit& tp) override { tp_ = tp; }
  bool tensor_parallel() const override { return true; }
  void release_scratch() {
    h_ = act_ = dact_ = dh_ = Tensor();
    rows_.release();
  }

 private:
  std::string text_;
  Kind kind_;
  TpSplit tp_;
  int64_t ffn_ = 0, layers_ = 1, context_ = 0, width_ = 0;
  int64_t local_ffn_ = 0;  // this rank's ffn columns (all of them unsplit)
  DType dtype_ = DType::F32;
  Tensor w_in_, b_in_, w_out_, b_out_, dw_in_, db_in_, dw_out_, db_out_;  // w_in_: fc, or gate|up joined
  Tensor h_, act_;    // kept: the first projection's output ([R, F] or [R, 2F]) and the activation [R, F]
  Tensor dact_, dh_;  // backward scratch
  TpRows rows_;       // the group's rows around the split projections
};

}  // namespace hpc::nn
