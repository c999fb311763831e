// The two ends of a language model: the token (+ learned position)
// embedding that turns token ids into vectors, and the output projection
// that turns vectors back into logits over the vocabulary — by default with
// the SAME token matrix (weight tying, Press & Wolf 2017, as GPT-2 and
// Llama 3.2 1B do), or with its own (tied=0: Llama 2, TinyLlama). A tied
// head declares its weight as tied_to "embed.token"; Model binds it to the
// embedding's parameter and gradient, so the head's backward adds
// dlogitsᵀ·h into the gradient the embedding's backward adds its scatter
// into. A model with rotary positions has no position table (positions=0).
//
// Split over a tensor-parallel group (nn/tensor_parallel.h), both hold the
// rows of this rank's shard of the vocabulary, padded to a multiple of
// 128·T (the padding rows zero, never looked up, so never trained). The
// embedding looks up the ids its shard holds (0 for the others) and rank 0
// adds the positions: the group's sum is the unsplit lookup, bit for bit
// (one term of it is not zero). The head gives this rank's columns of the
// logits (the loss is vocabulary-parallel, nn/loss.h) and sums its input
// gradient over the group. With sequence parallelism the embedding's sum
// is a reduce-scatter (each rank keeps its chunk of the rows) and the head
// all-gathers its input rows first, reduce-scatters its input gradient.
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
  split_ = vocab_split(vocab_, tp_);
  if (tp_.sequence_split() && context_ % tp_.size != 0)
    throw_layer_error(text_, "the context of " + std::to_string(context_) +
                                 " tokens is not divisible by the " + std::to_string(tp_.size) +
                                 " ranks of sequence parallelism");
  return Shape{tp_.sequence_split() ? context_ / tp_.size : context_, width_};
}

namespace {
// The token matrix's rows of this rank's vocabulary shard (all of it unsplit), embed's and lm_head's.
ParamSpec token_matrix(const char* name, const VocabSplit& split, int64_t width, const TpSplit& tp) {
  ParamSpec token{name, Shape{split.shard, width}, Init::Normal002, width, split.vocab, false};
  if (tp.active())
    token.shard = ParamShard::block(Shape{split.vocab, width}, 0, tp.size, tp.rank, split.padded);
  return token;
}
}  // namespace

std::vector<ParamSpec> Embedding::param_specs() const {
  // Embeddings are not decayed (they are lookups, not linear maps; nanoGPT and GPT-2 recipes).
  std::vector<ParamSpec> specs = {token_matrix("token", split_, width_, tp_)};
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

void Embedding::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  if (!tp_.active()) return backend::embedding_forward(x, wte_, wpe_, y);
  HPC_ASSERT(ctx.tp != nullptr, "embed: a split model needs RunCtx::tp");
  const Tensor wpe = tp_.rank == 0 ? wpe_ : Tensor();
  if (!tp_.sequence_split()) {
    backend::embedding_shard_forward(x, wte_, split_.first, vocab_, wpe, y);
    return ctx.tp->sum(y);
  }
  const Tensor full = scratch(full_, Shape{x.count(), width_}, y.dtype(), y.device());
  backend::embedding_shard_forward(x, wte_, split_.first, vocab_, wpe, full);
  ctx.tp->sum_scatter(full, y);
}

void Embedding::decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) {
  const int64_t n = x.count();
  if (positions_ > 0 && pos + n > positions_)
    throw UserError("embed: position " + std::to_string(pos + n - 1) + " is past the model's " +
                    std::to_string(positions_) + " learned positions");
  const Tensor wpe = positions_ > 0 ? wpe_.slice(pos * width_, Shape{positions_ - pos, width_}) : Tensor();
  if (!tp_.active()) return backend::embedding_forward(x, wte_, wpe, y);
  HPC_ASSERT(ctx.tp != nullptr, "embed: a split model needs RunCtx::tp");
  backend::embedding_shard_forward(x, wte_, split_.first, vocab_, tp_.rank == 0 ? wpe : Tensor(), y);
  ctx.tp->sum(y);
}

void Embedding::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor&, const RunCtx& ctx) {
  // Token ids have no gradient: dx is never written. Split, each rank adds its shard's rows, and
  // every rank the positions' whole gradient (dy, or with sequence parallelism the rows gathered,
  // is the same on every rank: the position matrix's gradient is identical, not partial).
  if (!tp_.active()) return backend::embedding_backward(x, dy, dwte_, dwpe_);
  Tensor rows = dy;
  if (tp_.sequence_split()) {
    HPC_ASSERT(ctx.tp != nullptr, "embed: a split model needs RunCtx::tp");
    rows = scratch(full_, Shape{x.count(), width_}, dy.dtype(), dy.device());
    ctx.tp->gather(dy, rows);
  }
  backend::embedding_shard_backward(x, rows, dwte_, split_.first, vocab_, dwpe_);
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
  context_ = tp_.sequence_split() ? in[0] * tp_.size : in[0];  // its input: this rank's chunk of the rows
  width_ = in[1];
  split_ = vocab_split(vocab_, tp_);
  return Shape{context_, split_.shard};  // split: this rank's columns of the padded vocabulary
}

std::vector<ParamSpec> LmHead::param_specs() const {
  ParamSpec w = token_matrix("weight", split_, width_, tp_);
  w.weight_decay = !tied_;
  if (tied_) w.tied_to = "embed.token";
  return {w};
}

VocabSplit LmHead::output_vocab() const { return split_; }

void LmHead::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 1 && grads.size() == 1, "lm_head: bind count");
  weight_ = params[0], dweight_ = grads[0];
}

// The rows the head projects: x, or with sequence parallelism every rank's chunk gathered.
Tensor LmHead::input_rows(const Tensor& x, const RunCtx& ctx) {
  if (!tp_.sequence_split()) return x;
  HPC_ASSERT(ctx.tp != nullptr, "lm_head: a split model needs RunCtx::tp");
  Tensor rows = scratch(x_full_, Shape{x.count() / width_ * tp_.size, width_}, x.dtype(), x.device());
  ctx.tp->gather(x, rows);
  return rows;
}

void LmHead::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  const Tensor h = input_rows(x, ctx);
  const int64_t rows = h.count() / width_;
  backend::gemm(false, true, rows, split_.shard, width_, 1.0, h, weight_, 0.0, y);  // logits = h·Wᵀ
}

void LmHead::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx& ctx) {
  const Tensor h = tp_.sequence_split() ? x_full_.slice(0, Shape{x.count() * tp_.size}) : x;
  const int64_t rows = h.count() / width_, cols = split_.shard;
  backend::gemm(true, false, cols, width_, rows, 1.0, dy, h, 1.0, dweight_);  // dW += dyᵀ·h
  if (!dx.defined()) return;
  if (!tp_.active()) return backend::gemm(false, false, rows, width_, cols, 1.0, dy, weight_, 0.0, dx);
  // Split: each shard's part of dh, summed over the group (the same bits on every rank), or with
  // sequence parallelism summed and scattered: each rank keeps its chunk of the rows.
  HPC_ASSERT(ctx.tp != nullptr, "lm_head: a split model needs RunCtx::tp");
  if (!tp_.sequence_split()) {
    backend::gemm(false, false, rows, width_, cols, 1.0, dy, weight_, 0.0, dx);
    return ctx.tp->sum(dx);
  }
  const Tensor full = scratch(dx_full_, Shape{rows, width_}, dx.dtype(), dx.device());
  backend::gemm(false, false, rows, width_, cols, 1.0, dy, weight_, 0.0, full);
  ctx.tp->sum_scatter(full, dx);
}

}  // namespace hpc::nn
