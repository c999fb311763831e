// 2-D convolution (NCHW, square kernel): argument checks, shapes and
// parameters here; the computation is conv_lowering.h's conv2d_forward/backward:
// the device's convolution library where it takes the tensors (cuDNN, oneDNN), else
// im2col + GEMM.
#include "core/error.h"
#include "nn/layers/conv_lowering.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

Conv2d::Conv2d(const LayerArgs& args) {
  ArgReader r(args, {"out", "kernel", "stride", "pad", "bias"});
  text_ = r.text();
  out_ = r.required_int("out", 1);
  geom_.kernel = r.required_int("kernel", 1);
  geom_.stride = r.int_or("stride", 1, 1);
  geom_.pad = r.int_or("pad", 0, 0);
  has_bias_ = r.flag_or("bias", true);
  r.finish();
}

std::string Conv2d::spec() const {
  return "conv(" + std::to_string(out_) + "," + std::to_string(geom_.kernel) +
         ",stride=" + std::to_string(geom_.stride) + ",pad=" + std::to_string(geom_.pad) +
         (has_bias_ ? ")" : ",bias=0)");
}

Shape Conv2d::build(const Shape& in, DType) {
  if (in.rank() != 3) throw_layer_error(text_, "needs a CxHxW input, got " + in.str());
  geom_ = kernels::ConvShape::make(1, in[0], in[1], in[2], geom_.kernel, geom_.stride, geom_.pad);
  const int64_t k = geom_.kernel, p = geom_.pad;
  if (k > geom_.height + 2 * p || k > geom_.width + 2 * p)
    throw_layer_error(text_, "kernel " + std::to_string(k) + " larger than the " +
                                 std::to_string(geom_.height) + "x" + std::to_string(geom_.width) +
                                 " input (pad " + std::to_string(p) + ")");
  return Shape{out_, geom_.out_h, geom_.out_w};
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  const int64_t k = geom_.kernel, fan_in = geom_.col_rows(), fan_out = out_ * k * k;
  std::vector<ParamSpec> specs{
      {"weight", Shape{out_, geom_.channels, k, k}, Init::KaimingUniform, fan_in, fan_out, true}};
  if (has_bias_) specs.push_back({"bias", Shape{out_}, Init::Zeros, fan_in, fan_out, false});
  return specs;
}

void Conv2d::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == (has_bias_ ? 2u : 1u) && grads.size() == params.size(), "conv: bind count");
  weight_ = params[0];
  dweight_ = grads[0];
  if (has_bias_) {
    bias_ = params[1];
    dbias_ = grads[1];
  }
}

int64_t Conv2d::forward_flops() const { return 2 * out_ * geom_.col_rows() * geom_.out_pixels(); }

// oneDNN takes and gives channel-blocked tensors as well as plain ones. The
// output stays plain with a bias (add_bias works on NCHW).
int64_t Conv2d::output_block(int64_t in, int64_t block, bool out_may) const {
  if (in != 0 && geom_.channels % in != 0) return -1;
  return out_may && block > 0 && !has_bias_ && out_ % block == 0 ? block : 0;
}

void Conv2d::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  conv2d_forward(x, weight_, bias_, geom_, y, scratch_);
}

void Conv2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  conv2d_backward(x, weight_, dy, geom_, dweight_, dbias_, dx, scratch_);
}

}  // namespace hpc::nn
