// One pre-norm transformer block, written once for both families:
//
//   h = x + attn(norm1(x));   y = h + mlp(norm2(h))
//
//   GPT-2 (block):        LayerNorm, attention with biases and learned
//                         positions (none here), GELU MLP 4× as wide
//   Llama (llama_block):  RMSNorm, bias-free attention with rotary
//                         positions and grouped kv heads, SwiGLU MLP
//
// The pieces are transformer_pieces.h's layers; this class only composes
// them, names their parameters (ln1.*, attn.*, ln2.*, mlp.*: GPT-2's names
// and order from before the families shared the block, so checkpoints and
// exports are unchanged) and runs the residual adds.
//
// Split over a tensor-parallel group, the pieces split themselves
// (transformer_pieces.h) and the block stays this composition: the norms
// and the residual adds run on the rows the block is given — all of them,
// replicated on every rank, or with sequence parallelism this rank's chunk,
// the attention and the MLP gathering and scattering around their
// projections.
//
// recompute=1 is gradient checkpointing per block (Chen et al. 2016): forward
// keeps nothing but its input (which the model holds anyway) and frees its
// intermediates; backward runs the same forward again, then the backward
// pass, then frees everything. Forward is a deterministic function of the
// input and parameters (no dropout here), so the recomputed activations and
// therefore the gradients are bitwise those of recompute=0; the price is one
// more forward per block (about +33% compute) and a re-allocation per step.
#include <algorithm>
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/rotary_args.h"
#include "nn/layers/transformer.h"

namespace hpc::nn {

namespace {

constexpr double LLAMA_THETA = 10000;  // Llama 2's rope_theta, config.json's default

// Llama's MLP width when none is given: 8/3 of the width (the same
// parameters as a 4× GELU MLP with a third projection), rounded up to a
// multiple of 256 (Llama's multiple_of), or of 32 for small widths.
int64_t llama_ffn(int64_t width) {
  const int64_t multiple = width >= 1024 ? 256 : 32;
  const int64_t f = (8 * width + 2) / 3;
  return (f + multiple - 1) / multiple * multiple;
}

}  // namespace

TransformerBlock::TransformerBlock(Family family, const LayerArgs& args) : family_(family) {
  const bool llama = family == Family::Llama;
  std::vector<std::string> names = {"heads", "kv_heads", "ffn", "layers", "recompute"};
  if (llama)
    for (const char* n : {"theta", "eps", "linear", "llama3", "low", "high", "orig"}) names.emplace_back(n);
  ArgReader r(args, names);
  text_ = r.text();
  heads_ = r.required_int("heads", 1);
  kv_heads_ = r.int_or("kv_heads", heads_, 1);
  ffn_ = r.int_or("ffn", 0, 1);
  layers_ = r.int_or("layers", 1, 1);
  recompute_ = r.flag_or("recompute", false);
  if (llama) {
    rotary_ = read_rotary(r, LLAMA_THETA);
    if (!rotary_.enabled()) r.fail("theta must be positive: Llama's positions are rotary");
    eps_ = r.real_or("eps", 1e-5);
    if (!(eps_ > 0)) r.fail("eps must be positive");
  }
  r.finish();
  if (heads_ % kv_heads_ != 0)
    r.fail("heads " + std::to_string(heads_) + " is not a multiple of kv_heads " + std::to_string(kv_heads_));
}

std::string TransformerBlock::spec() const {
  const bool llama = family_ == Family::Llama;
  std::string s = std::string(llama ? "llama_block(" : "block(") + std::to_string(heads_);
  if (kv_heads_ != heads_) s += ",kv_heads=" + std::to_string(kv_heads_);
  const int64_t default_ffn = llama ? llama_ffn(width_) : 4 * width_;
  if (ffn_ != 0 && (width_ == 0 || ffn_ != default_ffn)) s += ",ffn=" + std::to_string(ffn_);
  if (llama) {
    s += rotary_text(rotary_, LLAMA_THETA);
    if (eps_ != 1e-5) s += ",eps=" + number_text(eps_);
  }
  if (layers_ != 1) s += ",layers=" + std::to_string(layers_);
  return s + (recompute_ ? ",recompute=1" : "") + ")";
}

Shape TransformerBlock::build(const Shape& in, DType dtype) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  dtype_ = dtype;
  if (width_ % heads_ != 0)
    throw_layer_error(text_, "the width " + std::to_string(width_) + " is not a multiple of the " +
                                 std::to_string(heads_) + " heads");
  const bool llama = family_ == Family::Llama;
  if (ffn_ == 0) ffn_ = llama ? llama_ffn(width_) : 4 * width_;
  AttnConfig attn;
  attn.heads = heads_;
  attn.kv_heads = kv_heads_;
  attn.layers = layers_;
  attn.bias = !llama;
  attn.rotary = rotary_;
  attn_ = std::make_unique<Attention>(attn, text_ + " > attn");
  mlp_ = std::make_unique<Mlp>(llama ? Mlp::Kind::SwiGlu : Mlp::Kind::Gelu, ffn_, layers_, text_ + " > mlp");
  if (llama) {
    norm1_ = std::make_unique<RmsNorm>(eps_, text_ + " > ln1");
    norm2_ = std::make_unique<RmsNorm>(eps_, text_ + " > ln2");
  } else {
    norm1_ = std::make_unique<LayerNorm>(1e-5, text_ + " > ln1");
    norm2_ = std::make_unique<LayerNorm>(1e-5, text_ + " > ln2");
  }
  for (Layer* part : {static_cast<Layer*>(norm1_.get()), static_cast<Layer*>(norm2_.get()),
                      static_cast<Layer*>(attn_.get()), static_cast<Layer*>(mlp_.get())})
    part->set_split(tp_);
  norm1_->build(in, dtype);
  norm2_->build(in, dtype);
  attn_->build(in, dtype);
  mlp_->build(in, dtype);
  return in;
}

std::vector<ParamSpec> TransformerBlock::param_specs() const {
  std::vector<ParamSpec> specs;
  const Layer* parts[4] = {norm1_.get(), attn_.get(), norm2_.get(), mlp_.get()};
  const char* prefixes[4] = {"ln1.", "attn.", "ln2.", "mlp."};
  for (int i = 0; i < 4; ++i)
    for (ParamSpec p : parts[i]->param_specs()) {
      p.name = prefixes[i] + p.name;
      specs.push_back(std::move(p));
    }
  return specs;
}

void TransformerBlock::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  Layer* parts[4] = {norm1_.get(), attn_.get(), norm2_.get(), mlp_.get()};
  size_t at = 0;
  for (Layer* part : parts) {
    const size_t n = part->param_specs().size();
    HPC_ASSERT(at + n <= params.size() && params.size() == grads.size(), "block: bind count");
    part->bind(std::vector<Tensor>(params.begin() + long(at), params.begin() + long(at + n)),
               std::vector<Tensor>(grads.begin() + long(at), grads.begin() + long(at + n)));
    at += n;
  }
  HPC_ASSERT(at == params.size(), "block: bind count");
}

int64_t TransformerBlock::forward_flops() const { return attn_->forward_flops() + mlp_->forward_flops(); }

int64_t TransformerBlock::forward_saved_bytes(int64_t batch) const {
  const int64_t own = batch * context_ * width_ * 3 * int64_t(dtype_size(dtype_));  // a1, h1, a2
  return own + norm1_->activation_bytes(batch).kept + norm2_->activation_bytes(batch).kept +
         attn_->activation_bytes(batch).kept + mlp_->activation_bytes(batch).kept;
}

ActivationBytes TransformerBlock::activation_bytes(int64_t batch) const {
  const int64_t all = forward_saved_bytes(batch);
  return {recompute_ ? 0 : all, all, 0};
}

void TransformerBlock::release_scratch() {
  a1_ = h1_ = a2_ = Tensor();
  da2_ = dh1_ = da1_ = Tensor();
  norm1_->release_scratch();
  norm2_->release_scratch();
  attn_->release_scratch();
  mlp_->release_scratch();
}

void TransformerBlock::run_forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  const Shape stream{x.shape()[0], context_, width_};
  const Device dev = x.device();
  const Tensor a1 = scratch(a1_, stream, dtype_, dev), h1 = scratch(h1_, stream, dtype_, dev);
  const Tensor a2 = scratch(a2_, stream, dtype_, dev);
  norm1_->forward(x, a1, ctx);
  attn_->forward(a1, h1, ctx);
  backend::elementwise_add(h1, x, h1);  // h = x + attn(norm1(x))
  norm2_->forward(h1, a2, ctx);
  mlp_->forward(a2, y, ctx);  // y undefined (recompute): the MLP keeps its state, skips its output
  if (y.defined()) backend::elementwise_add(y, h1, y);  // y = h + mlp(norm2(h))
}

void TransformerBlock::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  run_forward(x, y, ctx);
  if (recompute_) release_scratch();
}

void TransformerBlock::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx,
                                const RunCtx& ctx) {
  if (recompute_) run_forward(x, Tensor(), ctx);
  const Shape stream{x.shape()[0], context_, width_};
  const Device dev = x.device();
  HPC_ASSERT(h1_.defined() && h1_.count() >= stream.count(), "block: backward before forward");
  const Tensor a1 = a1_.slice(0, stream), h1 = h1_.slice(0, stream), a2 = a2_.slice(0, stream);
  const Tensor da2 = scratch(da2_, stream, dtype_, dev), dh1 = scratch(dh1_, stream, dtype_, dev);
  const Tensor da1 = scratch(da1_, stream, dtype_, dev);
  mlp_->backward(a2, Tensor(), dy, da2, ctx);
  // dh = dy (skip path) + norm2ᵀ(da2); then the same for the attention half.
  backend::copy(dy, dh1);
  norm2_->backward_into(h1, da2, dh1, true);
  attn_->backward(a1, Tensor(), dh1, da1, ctx);
  if (dx.defined()) backend::copy(dh1, dx);
  norm1_->backward_into(x, da1, dx, true);
  if (recompute_) release_scratch();
}

void TransformerBlock::decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) {
  const Shape& rows = x.shape();
  const Device dev = x.device();
  const Tensor a1 = scratch(a1_, rows, dtype_, dev), h1 = scratch(h1_, rows, dtype_, dev);
  const Tensor a2 = scratch(a2_, rows, dtype_, dev);
  norm1_->forward(x, a1, ctx);
  attn_->decode(a1, h1, pos, ctx);
  backend::elementwise_add(h1, x, h1);
  norm2_->forward(h1, a2, ctx);
  mlp_->forward(a2, y, ctx);
  backend::elementwise_add(y, h1, y);
}

}  // namespace hpc::nn
