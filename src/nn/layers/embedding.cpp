// The two ends of a GPT: the token + position embedding that turns token ids
// into vectors, and the output projection that turns vectors back into
// logits over the vocabulary with the SAME token matrix (weight tying,
// Press & Wolf 2017, as GPT-2 does). The head declares its weight as
// tied_to "embed.token"; Model binds it to the embedding's parameter and
// gradient, so the head's backward adds dlogitsᵀ·h into the gradient the
// embedding's backward adds its scatter into.
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer.h"

namespace hpc::nn {

Embedding::Embedding(const LayerArgs& args) {
  ArgReader r(args, {"vocab", "width", "context"});
  text_ = r.text();
  vocab_ = r.required_int("vocab", 1);
  width_ = r.required_int("width", 1);
  context_ = r.required_int("context", 1);
  r.finish();
}

std::string Embedding::spec() const {
  return "embed(" + std::to_string(vocab_) + "," + std::to_string(width_) + "," + std::to_string(context_) +
         ")";
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
  return {{"token", Shape{vocab_, width_}, Init::Normal002, width_, vocab_, false},
          {"position", Shape{context_, width_}, Init::Normal002, width_, context_, false}};
}

void Embedding::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 2 && grads.size() == 2, "embed: bind count");
  wte_ = params[0], wpe_ = params[1], dwte_ = grads[0], dwpe_ = grads[1];
}

void Embedding::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  backend::embedding_forward(x, wte_, wpe_, y);
}

void Embedding::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor&, const RunCtx&) {
  backend::embedding_backward(x, dy, dwte_, dwpe_);  // token ids have no gradient: dx is never written
}

TiedHead::TiedHead(const LayerArgs& args) {
  ArgReader r(args, {"vocab"});
  text_ = r.text();
  vocab_ = r.required_int("vocab", 1);
  r.finish();
}

std::string TiedHead::spec() const { return "lm_head(" + std::to_string(vocab_) + ")"; }

Shape TiedHead::build(const Shape& in, DType) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  return Shape{context_, vocab_};
}

std::vector<ParamSpec> TiedHead::param_specs() const {
  ParamSpec w{"weight", Shape{vocab_, width_}, Init::Normal002, width_, vocab_, false};
  w.tied_to = "embed.token";
  return {w};
}

void TiedHead::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 1 && grads.size() == 1, "lm_head: bind count");
  weight_ = params[0], dweight_ = grads[0];
}

void TiedHead::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t rows = x.count() / width_;
  backend::gemm(false, true, rows, vocab_, width_, 1.0, x, weight_, 0.0, y);  // logits = h·Wᵀ
}

void TiedHead::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  const int64_t rows = x.count() / width_;
  backend::gemm(true, false, vocab_, width_, rows, 1.0, dy, x, 1.0, dweight_);  // dW += dyᵀ·h
  if (dx.defined()) backend::gemm(false, false, rows, width_, vocab_, 1.0, dy, weight_, 0.0, dx);
}

}  // namespace hpc::nn
