// The position-wise MLP of a transformer block, in its two forms:
//   GELU (GPT-2):    y = proj(gelu(fc(x)))      fc and proj with biases, tanh GELU
//   SwiGLU (Llama):  y = down(silu(gate(x))·up(x))   no biases (Shazeer 2020)
// Every token is a row, so each projection is one GEMM over the batch; gate
// and up are adjacent parameters, joined into one [2F, C] matrix, so they are
// one GEMM too, whose rows hold [gate | up] as swiglu_forward takes them.
// The output projection writes into the residual stream: init scale
// 1/√(2·layers).
//
// Split over a tensor-parallel group (Megatron-LM), each rank holds ffn/T
// columns of the first projection(s) (fc and its bias; gate and up, still
// adjacent, so [gate | up] stays one GEMM per rank) and the same input
// columns of the output projection: its output is a partial sum, reduced
// over the group (TpRows) before the output bias is added, once.
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

namespace {
const char* spec_name(Mlp::Kind k) { return k == Mlp::Kind::Gelu ? "mlp" : "swiglu"; }
}  // namespace

Mlp::Mlp(Kind kind, const LayerArgs& args) : kind_(kind) {
  ArgReader r(args, {"ffn", "layers"});
  text_ = r.text();
  ffn_ = r.required_int("ffn", 1);
  layers_ = r.int_or("layers", 1, 1);
  r.finish();
}

std::string Mlp::spec() const {
  return std::string(spec_name(kind_)) + "(" + std::to_string(ffn_) +
         (layers_ == 1 ? "" : ",layers=" + std::to_string(layers_)) + ")";
}

Shape Mlp::build(const Shape& in, DType dtype) {
  if (in.rank() != 2) throw_layer_error(text_, "needs [tokens, width] input, got " + in.str());
  context_ = in[0];
  width_ = in[1];
  dtype_ = dtype;
  if (tp_.active() && ffn_ % tp_.size != 0)
    throw_layer_error(text_, "its " + std::to_string(ffn_) + " ffn columns cannot be split over dist.tp " +
                                 std::to_string(tp_.size) + " ranks (not a multiple)");
  local_ffn_ = ffn_ / tp_.size;
  if (tp_.sequence_split()) context_ *= tp_.size;  // its input: this rank's chunk of the rows
  rows_.configure(tp_, width_);
  return in;
}

std::vector<ParamSpec> Mlp::param_specs() const {
  const int64_t c = width_, f = ffn_, lf = local_ffn_;
  const double out_scale = 1.0 / std::sqrt(2.0 * double(layers_));
  const bool split = tp_.active();
  // Rank r's columns of the first projection(s): rows of [F, C] (or of the bias [F]); of the output
  // projection: the same columns of [C, F].
  const auto by_columns = [&](ParamSpec p) {
    if (split)
      p.shard = ParamShard::block(p.shape.rank() == 1 ? Shape{f} : Shape{f, c}, 0, tp_.size, tp_.rank);
    return p;
  };
  ParamSpec out{
      kind_ == Kind::Gelu ? "proj.weight" : "down.weight", Shape{c, lf}, Init::Normal002, f, c, true};
  out.init_scale = out_scale;
  if (split) out.shard = ParamShard::block(Shape{c, f}, 1, tp_.size, tp_.rank);
  if (kind_ == Kind::Gelu) {
    ParamSpec out_bias{"proj.bias", Shape{c}, Init::Zeros, f, c, false};
    out_bias.tp_partial = tp_.sequence_split();  // added to this rank's rows only
    return {by_columns({"fc.weight", Shape{lf, c}, Init::Normal002, c, f, true}),
            by_columns({"fc.bias", Shape{lf}, Init::Zeros, c, f, false}), out, out_bias};
  }
  return {by_columns({"gate.weight", Shape{lf, c}, Init::Normal002, c, f, true}),
          by_columns({"up.weight", Shape{lf, c}, Init::Normal002, c, f, true}), out};
}

void Mlp::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  if (kind_ == Kind::Gelu) {
    HPC_ASSERT(params.size() == 4 && grads.size() == 4, "mlp: bind count");
    w_in_ = params[0], b_in_ = params[1], w_out_ = params[2], b_out_ = params[3];
    dw_in_ = grads[0], db_in_ = grads[1], dw_out_ = grads[2], db_out_ = grads[3];
    return;
  }
  HPC_ASSERT(params.size() == 3 && grads.size() == 3, "swiglu: bind count");
  const Shape gate_up{2 * local_ffn_, width_};
  w_in_ = params[0].joined(params[1], gate_up);
  dw_in_ = grads[0].joined(grads[1], gate_up);
  w_out_ = params[2], dw_out_ = grads[2];
}

int64_t Mlp::forward_flops() const {
  const int64_t projections = kind_ == Kind::Gelu ? 2 : 3;
  return 2 * projections * context_ * width_ * local_ffn_;
}

ActivationBytes Mlp::activation_bytes(int64_t batch) const {
  const int64_t in = kind_ == Kind::Gelu ? local_ffn_ : 2 * local_ffn_;  // h: fc's output, or [gate | up]
  const int64_t gathered = tp_.sequence_split() ? width_ : 0;  // sequence parallelism: the gathered input
  const int64_t b = batch * context_ * (in + local_ffn_ + gathered) * int64_t(dtype_size(dtype_));
  return {b, b, b};
}

void Mlp::forward(const Tensor& x_part, const Tensor& y, const RunCtx& ctx) {
  const int64_t rows = rows_.all_rows(x_part.count() / width_), c = width_, f = local_ffn_;
  const Device dev = x_part.device();
  const Tensor x = rows_.in(x_part, ctx);
  const int64_t in = kind_ == Kind::Gelu ? f : 2 * f;
  const Tensor h = scratch(h_, Shape{rows, in}, dtype_, dev), a = scratch(act_, Shape{rows, f}, dtype_, dev);
  backend::gemm(false, true, rows, in, c, 1.0, x, w_in_, 0.0, h);
  if (kind_ == Kind::Gelu) {
    backend::add_bias(h, b_in_, f, 1);
    backend::activation_forward(kernels::ActivationKind::Gelu, h, a);
  } else {
    backend::swiglu_forward(h, a);
  }
  if (!y.defined()) return;  // a recomputing block needs only the state kept above
  backend::gemm(false, true, rows, c, f, 1.0, a, w_out_, 0.0, rows_.out(y));
  rows_.reduce_output(y, ctx);  // split: the ffn columns' partial sums, summed over the group
  if (kind_ == Kind::Gelu) backend::add_bias(y, b_out_, c, 1);
}

void Mlp::backward(const Tensor& x_part, const Tensor&, const Tensor& dy_part, const Tensor& dx,
                   const RunCtx& ctx) {
  const int64_t rows = rows_.all_rows(x_part.count() / width_), c = width_, f = local_ffn_;
  const Device dev = x_part.device();
  const Tensor x = rows_.kept_in(x_part);
  const int64_t in = kind_ == Kind::Gelu ? f : 2 * f;
  HPC_ASSERT(act_.defined() && act_.count() >= rows * f, "mlp: backward before forward");
  const Tensor h = h_.slice(0, Shape{rows, in}), a = act_.slice(0, Shape{rows, f});
  const Tensor da = scratch(dact_, Shape{rows, f}, dtype_, dev);
  if (kind_ == Kind::Gelu)
    backend::bias_grad(dy_part, db_out_, c, 1);  // this rank's rows under sequence parallelism
  const Tensor dy = rows_.out_grad(dy_part, ctx);
  backend::gemm(true, false, c, f, rows, 1.0, dy, a, 1.0, dw_out_);  // dW_out += dyᵀ·a
  backend::gemm(false, false, rows, f, c, 1.0, dy, w_out_, 0.0, da);
  Tensor dh = da;  // GELU: in place, da becomes d(fc)
  if (kind_ == Kind::Gelu) {
    backend::activation_backward(kernels::ActivationKind::Gelu, h, a, da, da);
  } else {
    dh = scratch(dh_, Shape{rows, in}, dtype_, dev);
    backend::swiglu_backward(h, da, dh);
  }
  backend::gemm(true, false, in, c, rows, 1.0, dh, x, 1.0, dw_in_);  // dW_in += dhᵀ·x
  if (kind_ == Kind::Gelu) backend::bias_grad(dh, db_in_, f, 1);
  if (!dx.defined()) return;
  backend::gemm(false, false, rows, c, in, 1.0, dh, w_in_, 0.0, rows_.in_grad(dx));
  rows_.reduce_input_grad(dx, ctx);  // split: each rank's columns' part of dx
}

}  // namespace hpc::nn
