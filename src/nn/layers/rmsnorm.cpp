// RMSNorm (Zhang & Sennrich 2019) over the last dimension, as Llama uses it:
// y = weight·x·rstd, rstd = 1/√(mean(x²) + eps) — no mean subtracted, no
// bias, eps inside the root, and the weight multiplying (some models' norms
// use 1 + weight; Llama's does not). weight starts at 1 and is not decayed.
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

RmsNorm::RmsNorm(const LayerArgs& args) {
  ArgReader r(args, {"eps"});
  text_ = r.text();
  eps_ = r.real_or("eps", 1e-5);
  r.finish();
  if (!(eps_ > 0)) r.fail("eps must be positive");
}

std::string RmsNorm::spec() const {
  return eps_ == 1e-5 ? "rmsnorm" : "rmsnorm(eps=" + number_text(eps_) + ")";
}

Shape RmsNorm::build(const Shape& in, DType dtype) {
  if (in.rank() == 0 || in.count() == 0) throw_layer_error(text_, "needs a non-empty input, got " + in.str());
  width_ = in[in.rank() - 1];
  rows_per_sample_ = in.count() / width_;
  dtype_ = dtype;
  return in;
}

std::vector<ParamSpec> RmsNorm::param_specs() const {
  return partial_over_group({{"weight", Shape{width_}, Init::Ones, width_, width_, false}});
}

void RmsNorm::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 1 && grads.size() == 1, "rmsnorm: bind count");
  weight_ = params[0], dweight_ = grads[0];
}

ActivationBytes RmsNorm::activation_bytes(int64_t batch) const {
  const int64_t b = batch * rows_per_sample_ * int64_t(dtype_size(dtype_));
  return {b, b, b};
}

void RmsNorm::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t rows = x.count() / width_;
  backend::rmsnorm_forward(x, weight_, eps_, y, scratch(rstd_, Shape{rows}, dtype_, x.device()));
}

void RmsNorm::backward_into(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate) {
  const int64_t rows = x.count() / width_;
  HPC_ASSERT(rstd_.defined() && rstd_.count() >= rows, "rmsnorm: backward before forward");
  backend::rmsnorm_backward(x, dy, weight_, rstd_.slice(0, Shape{rows}), dx, accumulate, dweight_);
}

}  // namespace hpc::nn
