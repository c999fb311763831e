// Causal self-attention (Vaswani et al. 2017, GPT-2's masked variant), with
// grouped-query attention (Ainslie et al. 2023: kv_heads key/value heads
// shared by groups of query heads; 1 is multi-query) and rotary positions
// (Su et al. 2021) as Llama uses them. One GEMM projects every token of the
// batch to [q | k | v] (heads side by side), the rotary turn is applied in
// place to q and k, backend::attention_forward does softmax(q·kᵀ/√d) with the
// causal mask per (sample, head), and one GEMM projects the heads' outputs
// back (a residual projection: initialised with the 1/√(2·layers) scale).
//
// The q, k and v weights are three parameters in a row of the flat buffer
// (or GPT-2's one packed qkv matrix); their joined view is the projection's
// one [(H + 2·KV)·d, C] matrix. The qkv kept for backward is the rotated
// one (attention's gradient is with respect to it); backward turns dq and
// dk back by the inverse rotation before the projection's gradients.
//
// Split over a tensor-parallel group (Megatron-LM), each rank holds whole
// heads: heads/T query heads and kv_heads/T key/value heads (query head h
// still reads kv head h/group), i.e. its rows of q, k and v (of GPT-2's
// packed qkv, three pieces) and its input columns of proj. Its heads' output
// projected by its columns of proj is a partial sum: the group sums it (or
// reduce-scatters it, sequence parallelism) and then proj.bias is added,
// once. The input gradient is summed the same way (TpRows).
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/rotary_args.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

Attention::Attention(const LayerArgs& args) {
  ArgReader r(args, {"heads", "kv_heads", "theta", "bias", "layers"});
  text_ = r.text();
  cfg_.heads = r.required_int("heads", 1);
  cfg_.kv_heads = r.int_or("kv_heads", cfg_.heads, 1);
  cfg_.rotary = read_rotary(r, 0);
  cfg_.bias = r.flag_or("bias", true);
  cfg_.layers = r.int_or("layers", 1, 1);
  r.finish();
}

std::string Attention::spec() const {
  std::string s = "attn(" + std::to_string(cfg_.heads);
  if (cfg_.kv_heads != 0 && cfg_.kv_heads != cfg_.heads) s += ",kv_heads=" + std::to_string(cfg_.kv_heads);
  s += rotary_text(cfg_.rotary, 0);
  if (!cfg_.bias) s += ",bias=0";
  if (cfg_.layers != 1) s += ",layers=" + std::to_string(cfg_.layers);
  return s + ")";
}

Shape Attention::build(const Shape& in, DType dtype) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  const int64_t kv = cfg_.kv_heads > 0 ? cfg_.kv_heads : cfg_.heads;
  if (cfg_.heads % kv != 0)
    throw_layer_error(text_, "the " + std::to_string(cfg_.heads) + " heads are not a multiple of the " +
                                 std::to_string(kv) + " kv_heads (each key/value head serves a whole group)");
  if (width_ % cfg_.heads != 0)
    throw_layer_error(text_, "the width " + std::to_string(width_) + " is not a multiple of the " +
                                 std::to_string(cfg_.heads) + " heads");
  full_ = {cfg_.heads, kv, width_ / cfg_.heads};
  if (tp_.active() && (full_.heads % tp_.size != 0 || full_.kv_heads % tp_.size != 0))
    throw_layer_error(text_, "its " + std::to_string(full_.heads) + " heads and " +
                                 std::to_string(full_.kv_heads) + " kv_heads cannot be split over dist.tp " +
                                 std::to_string(tp_.size) +
                                 " ranks (each rank takes whole heads and whole kv heads: both must be "
                                 "multiples of dist.tp)");
  dims_ = {full_.heads / tp_.size, full_.kv_heads / tp_.size, full_.head_dim};
  if (tp_.sequence_split()) context_ *= tp_.size;  // its input: this rank's chunk of the rows
  rows_.configure(tp_, width_);
  if (cfg_.rotary.enabled() && dims_.head_dim % 2 != 0)
    throw_layer_error(text_,
                      "rotary positions need an even head width, got " + std::to_string(dims_.head_dim));
  rotary_.configure(cfg_.rotary, dims_.head_dim);
  dtype_ = dtype;
  return in;
}

namespace {

// Rank `rank` of `parts`'s rows of a [q | k | v] stack (along dim 0) of the unsplit widths q, kv, kv:
// its heads' q rows, then its kv heads' k rows and v rows, adjacent.
ParamShard qkv_shard(const Shape& full, int64_t q, int64_t kv, int parts, int rank) {
  ParamShard s;
  s.dim = 0;
  s.full = full;
  const int64_t lq = q / parts, lkv = kv / parts;
  s.pieces = {{0, rank * lq, lq}, {lq, q + rank * lkv, lkv}, {lq + lkv, q + kv + rank * lkv, lkv}};
  return s;
}

}  // namespace

std::vector<ParamSpec> Attention::param_specs() const {
  const int64_t c = width_, q = dims_.q_width(), kv = dims_.kv_width(), w = dims_.qkv_width();
  const int64_t fq = full_.q_width(), fkv = full_.kv_width(), fw = full_.qkv_width();
  const bool split = tp_.active();
  ParamSpec proj{"proj.weight", Shape{c, q}, Init::Normal002, fq, c, true};
  proj.init_scale = 1.0 / std::sqrt(2.0 * double(cfg_.layers));
  if (split) proj.shard = ParamShard::block(Shape{c, fq}, 1, tp_.size, tp_.rank);
  if (cfg_.bias) {  // GPT-2: one packed c_attn matrix and its bias
    ParamSpec qkv{"qkv.weight", Shape{w, c}, Init::Normal002, c, fw, true};
    ParamSpec qkv_bias{"qkv.bias", Shape{w}, Init::Zeros, c, fw, false};
    ParamSpec proj_bias{"proj.bias", Shape{c}, Init::Zeros, fq, c, false};
    if (split) {
      qkv.shard = qkv_shard(Shape{fw, c}, fq, fkv, tp_.size, tp_.rank);
      qkv_bias.shard = qkv_shard(Shape{fw}, fq, fkv, tp_.size, tp_.rank);
    }
    proj_bias.tp_partial = tp_.sequence_split();  // added to this rank's rows only
    return {qkv, qkv_bias, proj, proj_bias};
  }
  ParamSpec wq{"q.weight", Shape{q, c}, Init::Normal002, c, fq, true};
  ParamSpec wk{"k.weight", Shape{kv, c}, Init::Normal002, c, fkv, true};
  ParamSpec wv{"v.weight", Shape{kv, c}, Init::Normal002, c, fkv, true};
  if (split) {
    wq.shard = ParamShard::block(Shape{fq, c}, 0, tp_.size, tp_.rank);
    wk.shard = ParamShard::block(Shape{fkv, c}, 0, tp_.size, tp_.rank);
    wv.shard = ParamShard::block(Shape{fkv, c}, 0, tp_.size, tp_.rank);
  }
  return {wq, wk, wv, proj};
}

void Attention::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  const Shape qkv{dims_.qkv_width(), width_};
  if (cfg_.bias) {
    HPC_ASSERT(params.size() == 4 && grads.size() == 4, "attn: bind count");
    w_qkv_ = params[0], b_qkv_ = params[1], w_proj_ = params[2], b_proj_ = params[3];
    dw_qkv_ = grads[0], db_qkv_ = grads[1], dw_proj_ = grads[2], db_proj_ = grads[3];
    return;
  }
  HPC_ASSERT(params.size() == 4 && grads.size() == 4, "attn: bind count");
  const Shape qk{dims_.q_width() + dims_.kv_width(), width_};
  w_qkv_ = params[0].joined(params[1], qk).joined(params[2], qkv);
  dw_qkv_ = grads[0].joined(grads[1], qk).joined(grads[2], qkv);
  w_proj_ = params[3], dw_proj_ = grads[3];
}

int64_t Attention::forward_flops() const {
  const int64_t t = context_, c = width_, q = dims_.q_width();
  // qkv, q·kᵀ and p·v (full T×T), proj
  return 2 * t * c * dims_.qkv_width() + 4 * t * t * q + 2 * t * q * c;
}

ActivationBytes Attention::activation_bytes(int64_t batch) const {
  // qkv, the heads' outputs, the probabilities; with sequence parallelism also the gathered input.
  const int64_t gathered = tp_.sequence_split() ? width_ : 0;
  const int64_t b =
      batch *
      (context_ * (dims_.qkv_width() + dims_.q_width() + gathered) + dims_.heads * context_ * context_) *
      int64_t(dtype_size(dtype_));
  return {b, b, b};
}

void Attention::release_scratch() {
  qkv_ = probs_ = heads_out_ = Tensor();
  dqkv_ = dheads_ = dscores_ = Tensor();
  rows_.release();
}

void Attention::forward(const Tensor& x_part, const Tensor& y, const RunCtx& ctx) {
  const int64_t n = x_part.shape()[0], rows = n * context_, c = width_, w = dims_.qkv_width(),
                q = dims_.q_width();
  const Device dev = x_part.device();
  const Tensor x = rows_.in(x_part, ctx);
  const Tensor qkv = scratch(qkv_, Shape{n, context_, w}, dtype_, dev);
  const Tensor probs = scratch(probs_, Shape{n, dims_.heads, context_, context_}, dtype_, dev);
  const Tensor heads = scratch(heads_out_, Shape{n, context_, q}, dtype_, dev);
  backend::gemm(false, true, rows, w, c, 1.0, x, w_qkv_, 0.0, qkv);
  if (cfg_.bias) backend::add_bias(qkv, b_qkv_, w, 1);
  if (cfg_.rotary.enabled()) {
    rotary_.ensure(context_, dtype_, dev);
    backend::rotary_apply(qkv, dims_.heads, dims_.kv_heads, rotary_.cos(0, context_),
                          rotary_.sin(0, context_), false, false);
  }
  backend::attention_forward(qkv, dims_.heads, dims_.kv_heads, probs, heads);
  backend::gemm(false, true, rows, c, q, 1.0, heads, w_proj_, 0.0, rows_.out(y));
  rows_.reduce_output(y, ctx);  // split: the heads' partial sums, summed over the group
  if (cfg_.bias) backend::add_bias(y, b_proj_, c, 1);
}

void Attention::backward(const Tensor& x_part, const Tensor&, const Tensor& dy_part, const Tensor& dx,
                         const RunCtx& ctx) {
  const int64_t n = x_part.shape()[0], rows = n * context_, c = width_, w = dims_.qkv_width(),
                q = dims_.q_width();
  const Device dev = x_part.device();
  HPC_ASSERT(qkv_.defined() && qkv_.count() >= rows * w, "attn: backward before forward");
  const Tensor x = rows_.kept_in(x_part);
  const Tensor qkv = qkv_.slice(0, Shape{n, context_, w});
  const Tensor probs = probs_.slice(0, Shape{n, dims_.heads, context_, context_});
  const Tensor heads = heads_out_.slice(0, Shape{n, context_, q});
  const Tensor dheads = scratch(dheads_, Shape{n, context_, q}, dtype_, dev);
  const Tensor dqkv = scratch(dqkv_, Shape{n, context_, w}, dtype_, dev);
  const Tensor dscores = scratch(dscores_, Shape{context_, context_}, dtype_, dev);

  if (cfg_.bias) backend::bias_grad(dy_part, db_proj_, c, 1);  // this rank's rows under sequence parallelism
  const Tensor dy = rows_.out_grad(dy_part, ctx);
  backend::gemm(true, false, c, q, rows, 1.0, dy, heads, 1.0, dw_proj_);  // dWproj += dyᵀ·heads
  backend::gemm(false, false, rows, q, c, 1.0, dy, w_proj_, 0.0, dheads);
  backend::attention_backward(qkv, probs, dheads, dims_.heads, dims_.kv_heads, dqkv, dscores);
  if (cfg_.rotary.enabled())
    backend::rotary_apply(dqkv, dims_.heads, dims_.kv_heads, rotary_.cos(0, context_),
                          rotary_.sin(0, context_), false, true);
  backend::gemm(true, false, w, c, rows, 1.0, dqkv, x, 1.0, dw_qkv_);  // dWqkv += dqkvᵀ·x
  if (cfg_.bias) backend::bias_grad(dqkv, db_qkv_, w, 1);
  if (!dx.defined()) return;
  backend::gemm(false, false, rows, c, w, 1.0, dqkv, w_qkv_, 0.0, rows_.in_grad(dx));
  rows_.reduce_input_grad(dx, ctx);  // split: each rank's heads' part of dx
}

void Attention::start_decode(int64_t max_positions) {
  cache_rows_ = max_positions;
  k_cache_ = v_cache_ = Tensor();  // allocated on the first decode, on its device
}

void Attention::decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) {
  HPC_ASSERT(!tp_.sequence_split(), "attn: no decoding with sequence parallelism");
  const int64_t n = x.count() / width_, c = width_, w = dims_.qkv_width(), q = dims_.q_width();
  const Device dev = x.device();
  if (pos + n > cache_rows_)
    throw UserError("attention: decoding position " + std::to_string(pos + n - 1) + " past the " +
                    std::to_string(cache_rows_) + " positions of the key/value cache");
  if (!k_cache_.defined() || k_cache_.device() != dev) {
    k_cache_ = Tensor(Shape{cache_rows_, dims_.kv_width()}, dtype_, dev);
    v_cache_ = Tensor(Shape{cache_rows_, dims_.kv_width()}, dtype_, dev);
  }
  const Tensor qkv = scratch(qkv_, Shape{1, n, w}, dtype_, dev);
  const Tensor heads = scratch(heads_out_, Shape{1, n, q}, dtype_, dev);
  backend::gemm(false, true, n, w, c, 1.0, x, w_qkv_, 0.0, qkv);
  if (cfg_.bias) backend::add_bias(qkv, b_qkv_, w, 1);
  if (cfg_.rotary.enabled()) {
    rotary_.ensure(pos + n, dtype_, dev);
    backend::rotary_apply(qkv, dims_.heads, dims_.kv_heads, rotary_.cos(pos, n), rotary_.sin(pos, n), false,
                          false);
  }
  backend::attention_decode(qkv, dims_.heads, dims_.kv_heads, k_cache_, v_cache_, pos, heads);
  backend::gemm(false, true, n, c, q, 1.0, heads, w_proj_, 0.0, y);
  rows_.reduce_output(y, ctx);
  if (cfg_.bias) backend::add_bias(y, b_proj_, c, 1);
}

}  // namespace hpc::nn
