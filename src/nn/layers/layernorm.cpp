// LayerNorm (Ba et al. 2016) over the last dimension: each token's C
// features are normalised on their own, so unlike BatchNorm nothing depends
// on the batch or on other ranks, and there are no running statistics.
// gamma starts at 1, beta at 0; neither is weight-decayed.
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

LayerNorm::LayerNorm(const LayerArgs& args) {
  ArgReader r(args, {"eps"});
  text_ = r.text();
  eps_ = r.real_or("eps", 1e-5);
  r.finish();
  if (!(eps_ > 0)) r.fail("eps must be positive");
}

std::string LayerNorm::spec() const { return eps_ == 1e-5 ? "ln" : "ln(eps=" + number_text(eps_) + ")"; }

Shape LayerNorm::build(const Shape& in, DType dtype) {
  if (in.rank() == 0 || in.count() == 0) throw_layer_error(text_, "needs a non-empty input, got " + in.str());
  width_ = in[in.rank() - 1];
  rows_per_sample_ = in.count() / width_;
  dtype_ = dtype;
  return in;
}

std::vector<ParamSpec> LayerNorm::param_specs() const {
  return partial_over_group({{"gamma", Shape{width_}, Init::Ones, width_, width_, false},
                             {"beta", Shape{width_}, Init::Zeros, width_, width_, false}});
}

void LayerNorm::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 2 && grads.size() == 2, "ln: bind count");
  gamma_ = params[0], beta_ = params[1], dgamma_ = grads[0], dbeta_ = grads[1];
}

ActivationBytes LayerNorm::activation_bytes(int64_t batch) const {
  const int64_t b = 2 * batch * rows_per_sample_ * int64_t(dtype_size(dtype_));
  return {b, b, b};
}

void LayerNorm::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t rows = x.count() / width_;
  const Tensor mean = scratch(mean_, Shape{rows}, dtype_, x.device());
  const Tensor rstd = scratch(rstd_, Shape{rows}, dtype_, x.device());
  backend::layernorm_forward(x, gamma_, beta_, eps_, y, mean, rstd);
}

void LayerNorm::backward_into(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) {
  const int64_t rows = x.count() / width_;
  HPC_ASSERT(mean_.defined() && mean_.count() >= rows, "ln: backward before forward");
  backend::layernorm_backward(x, dy, gamma_, mean_.slice(0, Shape{rows}), rstd_.slice(0, Shape{rows}), dx,
                              accumulate, dgamma_, dbeta_);
}

}  // namespace hpc::nn
