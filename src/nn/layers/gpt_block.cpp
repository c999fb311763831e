// One pre-LayerNorm transformer block as in GPT-2:
//
//   h = x + attn(ln1(x));   y = h + proj(gelu(fc(ln2(h))))
//
// with the MLP 4× as wide as the stream and GELU's tanh approximation (the
// one GPT-2 uses; kernels::ActivationKind::Gelu). The MLP's output projection
// writes into the residual stream, so like attn's it is initialised with the
// 1/√(2·layers) scale.
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
#include "nn/layers/transformer.h"

namespace hpc::nn {

namespace {

LayerArgs child_args(std::string name, std::vector<double> positional, std::map<std::string, double> named) {
  LayerArgs a{std::move(name), std::move(positional), std::move(named), {}, ""};
  a.text = args_text(a);
  return a;
}

}  // namespace

GptBlock::GptBlock(const LayerArgs& args) {
  ArgReader r(args, {"heads", "layers", "recompute"});
  text_ = r.text();
  heads_ = r.required_int("heads", 1);
  layers_ = r.int_or("layers", 1, 1);
  recompute_ = r.flag_or("recompute", false);
  r.finish();
  ln1_ = std::make_unique<LayerNorm>(child_args("ln", {}, {}));
  ln2_ = std::make_unique<LayerNorm>(child_args("ln", {}, {}));
  attn_ = std::make_unique<CausalSelfAttention>(
      child_args("attn", {double(heads_)}, {{"layers", double(layers_)}}));
}

std::string GptBlock::spec() const {
  return "block(" + std::to_string(heads_) + (layers_ == 1 ? "" : ",layers=" + std::to_string(layers_)) +
         (recompute_ ? ",recompute=1" : "") + ")";
}

Shape GptBlock::build(const Shape& in, DType dtype) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  dtype_ = dtype;
  ln1_->build(in, dtype);
  ln2_->build(in, dtype);
  if (width_ % heads_ != 0)
    throw_layer_error(text_, "the width " + std::to_string(width_) + " is not a multiple of the " +
                                 std::to_string(heads_) + " heads");
  attn_->build(in, dtype);
  return in;
}

std::vector<ParamSpec> GptBlock::param_specs() const {
  std::vector<ParamSpec> specs;
  auto add = [&](const Layer& l, const std::string& prefix) {
    for (ParamSpec p : l.param_specs()) {
      p.name = prefix + p.name;
      specs.push_back(std::move(p));
    }
  };
  const int64_t c = width_;
  add(*ln1_, "ln1.");
  add(*attn_, "attn.");
  add(*ln2_, "ln2.");
  ParamSpec out{"mlp.proj.weight", Shape{c, 4 * c}, Init::Normal002, 4 * c, c, true};
  out.init_scale = 1.0 / std::sqrt(2.0 * double(layers_));
  specs.push_back({"mlp.fc.weight", Shape{4 * c, c}, Init::Normal002, c, 4 * c, true});
  specs.push_back({"mlp.fc.bias", Shape{4 * c}, Init::Zeros, c, 4 * c, false});
  specs.push_back(out);
  specs.push_back({"mlp.proj.bias", Shape{c}, Init::Zeros, 4 * c, c, false});
  return specs;
}

void GptBlock::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 12 && grads.size() == 12, "block: bind count");
  auto part = [&](const std::vector<Tensor>& v, size_t from, size_t count) {
    return std::vector<Tensor>(v.begin() + long(from), v.begin() + long(from + count));
  };
  ln1_->bind(part(params, 0, 2), part(grads, 0, 2));
  attn_->bind(part(params, 2, 4), part(grads, 2, 4));
  ln2_->bind(part(params, 6, 2), part(grads, 6, 2));
  w_fc_ = params[8], b_fc_ = params[9], w_out_ = params[10], b_out_ = params[11];
  dw_fc_ = grads[8], db_fc_ = grads[9], dw_out_ = grads[10], db_out_ = grads[11];
}

int64_t GptBlock::forward_flops() const {
  return attn_->forward_flops() + 4 * context_ * width_ * 4 * width_;  // + fc and proj
}

int64_t GptBlock::forward_saved_bytes(int64_t batch) const {
  const int64_t rows = batch * context_;
  const int64_t own = rows * width_ * 3 + rows * 4 * width_ * 2;  // a1, h1, a2; fc, gelu
  return own * int64_t(dtype_size(dtype_)) + ln1_->activation_bytes(batch).kept +
         ln2_->activation_bytes(batch).kept + attn_->activation_bytes(batch).kept;
}

ActivationBytes GptBlock::activation_bytes(int64_t batch) const {
  const int64_t all = forward_saved_bytes(batch);
  return {recompute_ ? 0 : all, all, 0};
}

void GptBlock::release_scratch() {
  a1_ = h1_ = a2_ = fc_ = gelu_ = Tensor();
  dgelu_ = da2_ = dh1_ = da1_ = Tensor();
  ln1_->release_scratch();
  ln2_->release_scratch();
  attn_->release_scratch();
}

void GptBlock::run_forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  const int64_t n = x.shape()[0], rows = n * context_, c = width_;
  const Device dev = x.device();
  const Shape stream{n, context_, c}, wide{n, context_, 4 * c};
  const Tensor a1 = scratch(a1_, stream, dtype_, dev), h1 = scratch(h1_, stream, dtype_, dev);
  const Tensor a2 = scratch(a2_, stream, dtype_, dev);
  const Tensor f = scratch(fc_, wide, dtype_, dev), g = scratch(gelu_, wide, dtype_, dev);
  ln1_->forward(x, a1, ctx);
  attn_->forward(a1, h1, ctx);
  backend::elementwise_add(h1, x, h1);  // h = x + attn(ln1(x))
  ln2_->forward(h1, a2, ctx);
  backend::gemm(false, true, rows, 4 * c, c, 1.0, a2, w_fc_, 0.0, f);
  backend::add_bias(f, b_fc_, 4 * c, 1);
  backend::activation_forward(kernels::ActivationKind::Gelu, f, g);
  if (!y.defined()) return;
  backend::gemm(false, true, rows, c, 4 * c, 1.0, g, w_out_, 0.0, y);
  backend::add_bias(y, b_out_, c, 1);
  backend::elementwise_add(y, h1, y);
}

void GptBlock::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  run_forward(x, y, ctx);
  if (recompute_) release_scratch();
}

void GptBlock::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx,
                        const RunCtx& ctx) {
  if (recompute_) run_forward(x, Tensor(), ctx);
  const int64_t n = x.shape()[0], rows = n * context_, c = width_;
  const Device dev = x.device();
  const Shape stream{n, context_, c}, wide{n, context_, 4 * c};
  HPC_ASSERT(gelu_.defined() && gelu_.count() >= rows * 4 * c, "block: backward before forward");
  const Tensor a1 = a1_.slice(0, stream), h1 = h1_.slice(0, stream), a2 = a2_.slice(0, stream);
  const Tensor f = fc_.slice(0, wide), g = gelu_.slice(0, wide);
  const Tensor dg = scratch(dgelu_, wide, dtype_, dev);
  const Tensor da2 = scratch(da2_, stream, dtype_, dev), dh1 = scratch(dh1_, stream, dtype_, dev);
  const Tensor da1 = scratch(da1_, stream, dtype_, dev);

  // MLP: y = h + g·W_outᵀ + b_out, g = gelu(a2·W_fcᵀ + b_fc).
  backend::gemm(true, false, c, 4 * c, rows, 1.0, dy, g, 1.0, dw_out_);
  backend::bias_grad(dy, db_out_, c, 1);
  backend::gemm(false, false, rows, 4 * c, c, 1.0, dy, w_out_, 0.0, dg);
  backend::activation_backward(kernels::ActivationKind::Gelu, f, g, dg, dg);  // in place: dg becomes d(fc)
  backend::gemm(true, false, 4 * c, c, rows, 1.0, dg, a2, 1.0, dw_fc_);
  backend::bias_grad(dg, db_fc_, 4 * c, 1);
  backend::gemm(false, false, rows, c, 4 * c, 1.0, dg, w_fc_, 0.0, da2);
  // dh = dy (skip path) + ln2ᵀ(da2); then the same for the attention half.
  backend::copy(dy, dh1);
  ln2_->backward_into(h1, da2, dh1, true);
  attn_->backward(a1, Tensor(), dh1, da1, ctx);
  if (dx.defined()) backend::copy(dh1, dx);
  ln1_->backward_into(x, da1, dx, true);
  if (recompute_) release_scratch();
}

}  // namespace hpc::nn
