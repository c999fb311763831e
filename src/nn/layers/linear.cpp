// Fully connected layer: y = x·Wᵀ + b with W stored [out, in] (PyTorch's
// layout, so checkpoints and init formulas carry over). All three products
// of forward and backward are single GEMMs over the whole batch.
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

Linear::Linear(const LayerArgs& args) {
  ArgReader r(args, {"out", "bias"});
  text_ = r.text();
  out_ = r.required_int("out", 1);
  has_bias_ = r.flag_or("bias", true);
  r.finish();
}

std::string Linear::spec() const { return "linear(" + std::to_string(out_) + (has_bias_ ? ")" : ",bias=0)"); }

Shape Linear::build(const Shape& in, DType) {
  in_ = in.count();
  if (in.rank() == 0 || in_ <= 0) throw_layer_error(text_, "needs a non-empty input, got " + in.str());
  return Shape{out_};
}

std::vector<ParamSpec> Linear::param_specs() const {
  std::vector<ParamSpec> specs{{"weight", Shape{out_, in_}, Init::KaimingUniform, in_, out_, true}};
  if (has_bias_) specs.push_back({"bias", Shape{out_}, Init::Zeros, in_, out_, false});
  return specs;
}

void Linear::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == (has_bias_ ? 2u : 1u) && grads.size() == params.size(), "linear: bind count");
  weight_ = params[0];
  dweight_ = grads[0];
  if (has_bias_) {
    bias_ = params[1];
    dbias_ = grads[1];
  }
}

void Linear::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t n = x.shape()[0];
  backend::gemm(false, true, n, out_, in_, 1.0, x, weight_, 0.0, y);
  if (has_bias_) backend::add_bias(y, bias_, out_, 1);
}

void Linear::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  const int64_t n = x.shape()[0];
  backend::gemm(true, false, out_, in_, n, 1.0, dy, x, 1.0, dweight_);  // dW += dyᵀ·x
  if (has_bias_) backend::bias_grad(dy, dbias_, out_, 1);
  if (dx.defined()) backend::gemm(false, false, n, in_, out_, 1.0, dy, weight_, 0.0, dx);
}

}  // namespace hpc::nn
