// Pooling layers: maxpool(k, stride=k, pad=0), avgpool(k, stride=k) and gap.
//
// The windows must cover every input row and column: PyTorch silently drops
// the last rows/columns otherwise, which in a spec is nearly always a
// mistake in the arithmetic of the layer sizes. Without padding that means
// (H − k) divisible by the stride; with it (ResNet's stem, maxpool(3,
// stride=2, pad=1)) only a window's reach into the bottom/right padding may
// be cut. Padding is for max pooling only (padded positions never win).
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

Pool2d::Pool2d(Kind kind, const LayerArgs& args) : kind_(kind) {
  ArgReader r(args, {"kernel", "stride", "pad"});
  text_ = r.text();
  geom_.kernel = r.required_int("kernel", 1);
  geom_.stride = r.int_or("stride", geom_.kernel, 1);
  geom_.pad = r.int_or("pad", 0, 0);
  r.finish();
  if (geom_.pad > 0 && kind_ != Kind::Max) r.fail("pad applies to maxpool only");
  if (2 * geom_.pad > geom_.kernel) r.fail("pad must be at most half the kernel (PyTorch's rule)");
}

std::string Pool2d::spec() const {
  std::string s = (kind_ == Kind::Max ? "maxpool(" : "avgpool(") + std::to_string(geom_.kernel);
  if (geom_.stride != geom_.kernel) s += ",stride=" + std::to_string(geom_.stride);
  if (geom_.pad > 0) s += ",pad=" + std::to_string(geom_.pad);
  return s + ")";
}

Shape Pool2d::build(const Shape& in, DType) {
  if (in.rank() != 3) throw_layer_error(text_, "needs a CxHxW input, got " + in.str());
  geom_ = kernels::PoolShape::make(in[0], in[1], in[2], geom_.kernel, geom_.stride, geom_.pad);
  const std::string k = std::to_string(geom_.kernel),
                    hw = std::to_string(in[1]) + "x" + std::to_string(in[2]);
  if (geom_.kernel > geom_.height + 2 * geom_.pad || geom_.kernel > geom_.width + 2 * geom_.pad)
    throw_layer_error(text_, "kernel " + k + " larger than the " + hw + " input");
  // The last window must reach the last row and column (it may stop short of the padding).
  if ((geom_.out_h - 1) * geom_.stride - geom_.pad + geom_.kernel < geom_.height ||
      (geom_.out_w - 1) * geom_.stride - geom_.pad + geom_.kernel < geom_.width)
    throw_layer_error(text_, k + "x" + k + " windows with stride " + std::to_string(geom_.stride) +
                                 " do not tile the " + hw +
                                 " input (the last rows or columns would be dropped)");
  return Shape{geom_.planes, geom_.out_h, geom_.out_w};
}

void Pool2d::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  if (kind_ == Kind::Average) {
    backend::avg_pool_forward(x, geom_, y);
    return;
  }
  const Tensor arg = scratch(argmax_, y.shape(), DType::I32, y.device());
  backend::max_pool_forward(x, geom_, y, arg);
}

void Pool2d::backward(const Tensor&, const Tensor& y, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  if (!dx.defined()) return;
  if (kind_ == Kind::Average)
    backend::avg_pool_backward(dy, geom_, dx);
  else
    backend::max_pool_backward(dy, argmax_.slice(0, y.shape()), geom_, dx);
}

GlobalAvgPool::GlobalAvgPool(const LayerArgs& args) {
  ArgReader r(args, {});
  text_ = r.text();
  r.finish();
}

Shape GlobalAvgPool::build(const Shape& in, DType) {
  if (in.rank() != 3) throw_layer_error(text_, "needs a CxHxW input, got " + in.str());
  channels_ = in[0];
  spatial_ = in[1] * in[2];
  return Shape{in[0]};
}

// Takes a channel-blocked image; the [C] output is plain either way.
int64_t GlobalAvgPool::output_block(int64_t in, int64_t, bool) const {
  return in == 0 || channels_ % in == 0 ? 0 : -1;
}

void GlobalAvgPool::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  backend::spatial_mean_forward(x, spatial_, y);
}

void GlobalAvgPool::backward(const Tensor&, const Tensor&, const Tensor& dy, const Tensor& dx,
                             const RunCtx&) {
  if (dx.defined()) backend::spatial_mean_backward(dy, spatial_, dx);
}

}  // namespace hpc::nn
