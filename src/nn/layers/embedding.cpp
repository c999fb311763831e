// The two ends of a language model: the token (+ learned position)
// embedding that turns token ids into vectors, and the output projection
// that turns vectors back into logits over the vocabulary — by default with
// the SAME token matrix (weight tying, Press & Wolf 2017, as GPT-2 and
// Llama 3.2 1B do), or with its own (tied=0: Llama 2, TinyLlama). A tied
// head declares its weight as tied_to "embed.token"; Model binds it to the
// embedding's parameter and gradient, so the head's backward adds
// dlogitsᵀ·h into the gradient the embedding's backward adds its scatter
// into. A model with rotary positions has no position table (positions=0).
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer.h"

namespace hpc::nn {

Embedding::Embedding(const LayerArgs& args) {
  ArgReader r(args, {"vocab", "width", "context", "positions"});
  text_ = r.text();
  vocab_ = r.required_int("vocab", 1);
  width_ = r.required_int("width", 1);
  context_ = r.required_int("context", 1);
  positions_ = r.int_or("positions", context_, 0);
  r.finish();
  if (positions_ != 0 && positions_ < context_)
    r.fail("a position table of " + std::to_string(positions_) + " rows cannot cover the context of " +
           std::to_string(context_) + " tokens");
}

std::string Embedding::spec() const {
  return "embed(" + std::to_string(vocab_) + "," + std::to_string(width_) + "," + std::to_string(context_) +
         (positions_ == context_ ? "" : ",positions=" + std::to_string(positions_)) + ")";
}

Shape Embedding::build(const Shape& in, DType) {
  if (in != Shape{context_})
    throw_layer_error(text_, "takes windows of " + std::to_string(context_) +
                                 " token ids (the model's context), but the data gives samples of " +
                                 in.str() + ": set --model.context to the data's window or re-pack the data");
  return Shape{context_, width_};
}

std::vector<ParamSpec> Embedding::param_specs() const {
  // Embeddings are not decayed (they are lookups, not linear maps; nanoGPT and GPT-2 recipes).
  std::vector<ParamSpec> specs = {{"token", Shape{vocab_, width_}, Init::Normal002, width_, vocab_, false}};
  if (positions_ > 0)
    specs.push_back({"position", Shape{positions_, width_}, Init::Normal002, width_, positions_, false});
  return specs;
}

void Embedding::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == (positions_ > 0 ? 2u : 1u) && grads.size() == params.size(),
             "embed: bind count");
  wte_ = params[0], dwte_ = grads[0];
  if (positions_ > 0) wpe_ = params[1], dwpe_ = grads[1];
}

void Embedding::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  backend::embedding_forward(x, wte_, wpe_, y);
}

void Embedding::decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx&) {
  const int64_t n = x.count();
  if (positions_ > 0 && pos + n > positions_)
    throw UserError("embed: position " + std::to_string(pos + n - 1) + " is past the model's " +
                    std::to_string(positions_) + " learned positions");
  const Tensor wpe = positions_ > 0 ? wpe_.slice(pos * width_, Shape{positions_ - pos, width_}) : Tensor();
  backend::embedding_forward(x, wte_, wpe, y);
}

void Embedding::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor&, const RunCtx&) {
  backend::embedding_backward(x, dy, dwte_, dwpe_);  // token ids have no gradient: dx is never written
}

LmHead::LmHead(const LayerArgs& args) {
  ArgReader r(args, {"vocab", "tied"});
  text_ = r.text();
  vocab_ = r.required_int("vocab", 1);
  tied_ = r.flag_or("tied", true);
  r.finish();
}

std::string LmHead::spec() const {
  return "lm_head(" + std::to_string(vocab_) + (tied_ ? "" : ",tied=0") + ")";
}

Shape LmHead::build(const Shape& in, DType) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  return Shape{context_, vocab_};
}

std::vector<ParamSpec> LmHead::param_specs() const {
  ParamSpec w{"weight", Shape{vocab_, width_}, Init::Normal002, width_, vocab_, !tied_};
  if (tied_) w.tied_to = "embed.token";
  return {w};
}

void LmHead::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 1 && grads.size() == 1, "lm_head: bind count");
  weight_ = params[0], dweight_ = grads[0];
}

void LmHead::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t rows = x.count() / width_;
  backend::gemm(false, true, rows, vocab_, width_, 1.0, x, weight_, 0.0, y);  // logits = h·Wᵀ
}

void LmHead::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  const int64_t rows = x.count() / width_;
  backend::gemm(true, false, vocab_, width_, rows, 1.0, dy, x, 1.0, dweight_);  // dW += dyᵀ·h
  if (dx.defined()) backend::gemm(false, false, rows, width_, vocab_, 1.0, dy, weight_, 0.0, dx);
}

}  // namespace hpc::nn
