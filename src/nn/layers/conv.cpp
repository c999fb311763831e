// 2-D convolution (NCHW, square kernel) lowered to GEMM.
//
// Forward, per chunk of n samples:
//   cols [C·k·k, n·P] = im2col(x)          P = Ho·Wo
//   out  [OC, n·P]    = W [OC, C·k·k] · cols      (one GEMM for the chunk)
//   y    [n, OC, P]   = swap(out)          (+ bias)
// Backward: dyᵀ [OC, n·P] = swap(dy); dW += dyᵀ·colsᵀ; dcols = Wᵀ·dyᵀ; dx = col2im(dcols).
// Batching samples into one GEMM matters for small feature maps (7×7 at the
// end of a CNN gives P = 49: per-sample GEMMs would be far too thin). The
// columns are recomputed in backward rather than kept: im2col is cheap next
// to the GEMMs and this keeps the memory one chunk, not one batch.
#include <algorithm>

#include "backend/ops_core.h"
#include "core/error.h"
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

Shape Conv2d::build(const Shape& in, DType dtype) {
  if (in.rank() != 3) throw_layer_error(text_, "needs a CxHxW input, got " + in.str());
  geom_.channels = in[0];
  geom_.height = in[1];
  geom_.width = in[2];
  dtype_ = dtype;
  const int64_t k = geom_.kernel, p = geom_.pad;
  if (k > geom_.height + 2 * p || k > geom_.width + 2 * p)
    throw_layer_error(text_, "kernel " + std::to_string(k) + " larger than the " + std::to_string(geom_.height) +
                                 "x" + std::to_string(geom_.width) + " input (pad " + std::to_string(p) + ")");
  return Shape{out_, geom_.out_height(), geom_.out_width()};
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

int64_t Conv2d::chunk_samples(int64_t batch) const {
  const int64_t per_sample = geom_.col_rows() * geom_.out_pixels();
  return std::clamp<int64_t>(column_budget_ / per_sample, 1, std::max<int64_t>(batch, 1));
}

void Conv2d::forward(const Tensor& x, const Tensor& y, const RunCtx&) {
  const int64_t batch = x.shape()[0], pixels = geom_.out_pixels(), rows = geom_.col_rows();
  const int64_t chunk = chunk_samples(batch);
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    const Tensor ys = y.rows(s0, s0 + n);
    const Tensor cols = scratch(cols_, Shape{rows, n * pixels}, dtype_);
    backend::im2col(x.rows(s0, s0 + n), geom_, cols);
    if (n == 1) {  // [OC, P] is already the sample's NCHW layout
      backend::gemm(false, false, out_, pixels, rows, 1.0, weight_, cols, 0.0, ys);
      continue;
    }
    const Tensor out = scratch(gemm_out_, Shape{out_, n * pixels}, dtype_);
    backend::gemm(false, false, out_, n * pixels, rows, 1.0, weight_, cols, 0.0, out);
    backend::swap_leading_dims(out, ys, out_, n, pixels);
  }
  if (has_bias_) backend::add_bias(y, bias_, out_, pixels);
}

void Conv2d::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx, const RunCtx&) {
  const int64_t batch = x.shape()[0], pixels = geom_.out_pixels(), rows = geom_.col_rows();
  if (has_bias_) backend::bias_grad(dy, dbias_, out_, pixels);
  const int64_t chunk = chunk_samples(batch);
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    const Tensor cols = scratch(cols_, Shape{rows, n * pixels}, dtype_);
    backend::im2col(x.rows(s0, s0 + n), geom_, cols);
    const Tensor dys = dy.rows(s0, s0 + n);
    Tensor dyt = dys;  // [OC, n·P]; one sample is already in that layout
    if (n > 1) {
      dyt = scratch(gemm_out_, Shape{out_, n * pixels}, dtype_);
      backend::swap_leading_dims(dys, dyt, n, out_, pixels);
    }
    backend::gemm(false, true, out_, rows, n * pixels, 1.0, dyt, cols, 1.0, dweight_);
    if (!dx.defined()) continue;
    backend::gemm(true, false, rows, n * pixels, out_, 1.0, weight_, dyt, 0.0, cols);  // cols ← dcols
    backend::col2im(cols, geom_, dx.rows(s0, s0 + n));
  }
}

}  // namespace hpc::nn
