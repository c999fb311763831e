// The position-wise MLP of a transformer block, in its two forms:
//   GELU (GPT-2):    y = proj(gelu(fc(x)))      fc and proj with biases, tanh GELU
//   SwiGLU (Llama):  y = down(silu(gate(x))·up(x))   no biases (Shazeer 2020)
// Every token is a row, so each projection is one GEMM over the batch; gate
// and up are adjacent parameters, joined into one [2F, C] matrix, so they are
// one GEMM too, whose rows hold [gate | up] as swiglu_forward takes them.
// The output projection writes into the residual stream: init scale
// 1/√(2·layers).
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
  return in;
}

std::vector<ParamSpec> Mlp::param_specs() const {
  const int64_t c = width_, f = ffn_;
  const double out_scale = 1.0 / std::sqrt(2.0 * double(layers_));
  if (kind_ == Kind::Gelu) {
    ParamSpec proj{"proj.weight", Shape{c, f}, Init::Normal002, f, c, true};
    proj.init_scale = out_scale;
    return {{"fc.weight", Shape{f, c}, Init::Normal002, c, f, true},
            {"fc.bias", Shape{f}, Init::Zeros, c, f, false},
            proj,
            {"proj.bias", Shape{c}, Init::Zeros, f, c, false}};
  }
  ParamSpec down{"down.weight", Shape{c, f}, Init::Normal002, f, c, true};
  down.init_scale = out_scale;
  return {{"gate.weight", Shape{f, c}, Init::Normal002, c, f, true},
          {"up.weight", Shape{f, c}, Init::Normal002, c, f, true},
          down};
}

void Mlp::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  if (kind_ == Kind::Gelu) {
    HPC_ASSERT(params.size() == 4 && grads.size() == 4, "mlp: bind count");
    w_in_ = params[0], b_in_ = params[1], w_out_ = params[2], b_out_ = params[3];
    dw_in_ = grads[0], db_in_ = grads[1], dw_out_ = grads[2], db_out_ = grads[3];
    return;
  }
  HPC_ASSERT(params.size() == 3 && grads.size() == 3, "swiglu: bind count");
  const Shape gate_up{2 * ffn_, width_};
  w_in_ = params[0].joined(params[1], gate_up);
  dw_in_ = grads[0].joined(grads[1], gate_up);
  w_out_ = params[2], dw_out_ = grads[2];
}

int64_t Mlp::forward_flops() const {
  const int64_t projections = kind_ == Kind::Gelu ? 2 : 3;
  return 2 * projections * context_ * width_ * ffn_;
}

ActivationBytes Mlp::activation_bytes(int64_t batch) const {
  const int64_t in = kind_ == Kind::Gelu ? ffn_ : 2 * ffn_;  // h: fc's output, or [gate | up]
  const int64_t b = batch * context_ * (in + ffn_) * int64_t(dtype_size(dtype_));
  return {b, b, b};
}

void Mlp::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t rows = x.count() / width_, c = width_, f = ffn_;
  const Device dev = x.device();
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
  backend::gemm(false, true, rows, c, f, 1.0, a, w_out_, 0.0, y);
  if (kind_ == Kind::Gelu) backend::add_bias(y, b_out_, c, 1);
}

void Mlp::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  const int64_t rows = x.count() / width_, c = width_, f = ffn_;
  const Device dev = x.device();
  const int64_t in = kind_ == Kind::Gelu ? f : 2 * f;
  HPC_ASSERT(act_.defined() && act_.count() >= rows * f, "mlp: backward before forward");
  const Tensor h = h_.slice(0, Shape{rows, in}), a = act_.slice(0, Shape{rows, f});
  const Tensor da = scratch(dact_, Shape{rows, f}, dtype_, dev);
  backend::gemm(true, false, c, f, rows, 1.0, dy, a, 1.0, dw_out_);  // dW_out += dyᵀ·a
  if (kind_ == Kind::Gelu) backend::bias_grad(dy, db_out_, c, 1);
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
  if (dx.defined()) backend::gemm(false, false, rows, c, in, 1.0, dh, w_in_, 0.0, dx);
}

}  // namespace hpc::nn
