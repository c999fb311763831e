// Convolution as im2col + GEMM (conv_lowering.h): the same calls in the
// same order as ever, so CPU results stay the same bit for bit.
//
// Forward, per chunk of n samples:
//   cols [C·k·k, n·P] = im2col(x)          P = Ho·Wo
//   out  [OC, n·P]    = W [OC, C·k·k] · cols      (one GEMM for the chunk)
//   y    [n, OC, P]   = swap(out)          (the layer adds the bias)
// Backward: dyᵀ [OC, n·P] = swap(dy); dW += dyᵀ·colsᵀ; dcols = Wᵀ·dyᵀ; dx = col2im(dcols).
// Batching samples into one GEMM matters for small feature maps (7×7 at the
// end of a CNN gives P = 49: per-sample GEMMs would be far too thin). The
// columns are recomputed in backward rather than kept: im2col is cheap next
// to the GEMMs and this keeps the memory one chunk, not one batch.
#include "nn/layers/conv_lowering.h"

#include <algorithm>

#include "backend/ops.h"
#include "core/error.h"

namespace hpc::nn {

using namespace backend;  // the ops the lowering is made of

namespace {

// A view of buf shaped `shape`, reallocated only when too small (steady state allocates nothing).
Tensor reuse(Tensor& buf, const Shape& shape, DType dtype, Device device) {
  if (!buf.defined() || buf.dtype() != dtype || buf.device() != device || buf.count() < shape.count())
    buf = Tensor(shape, dtype, device);
  return buf.slice(0, shape);
}

int64_t chunk_samples(const kernels::ConvShape& g, int64_t batch, int64_t budget) {
  const int64_t per_sample = g.col_rows() * g.out_pixels();
  return std::clamp<int64_t>(budget / per_sample, 1, std::max<int64_t>(batch, 1));
}

int64_t out_channels(const Tensor& weight, const kernels::ConvShape& g) {
  return weight.count() / g.col_rows();
}

}  // namespace

void lowered_conv2d_forward(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g,
                            const Tensor& y, ConvScratch& s) {
  const int64_t batch = x.shape()[0], pixels = g.out_pixels(), rows = g.col_rows(),
                oc = out_channels(weight, g);
  const int64_t chunk = chunk_samples(g, batch, s.column_budget);
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    const Tensor ys = y.rows(s0, s0 + n);
    const Tensor cols = reuse(s.cols, Shape{rows, n * pixels}, x.dtype(), x.device());
    im2col(x.rows(s0, s0 + n), g, cols);
    if (n == 1) {  // [OC, P] is already the sample's NCHW layout
      gemm(false, false, oc, pixels, rows, 1.0, weight, cols, 0.0, ys);
      continue;
    }
    const Tensor out = reuse(s.gemm_out, Shape{oc, n * pixels}, x.dtype(), x.device());
    gemm(false, false, oc, n * pixels, rows, 1.0, weight, cols, 0.0, out);
    swap_leading_dims(out, ys, oc, n, pixels);
  }
}

void lowered_conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const kernels::ConvShape& g, const Tensor& dweight, const Tensor& dx,
                             ConvScratch& s) {
  const int64_t batch = x.shape()[0], pixels = g.out_pixels(), rows = g.col_rows(),
                oc = out_channels(weight, g);
  const int64_t chunk = chunk_samples(g, batch, s.column_budget);
  for (int64_t s0 = 0; s0 < batch; s0 += chunk) {
    const int64_t n = std::min(chunk, batch - s0);
    const Tensor cols = reuse(s.cols, Shape{rows, n * pixels}, x.dtype(), x.device());
    im2col(x.rows(s0, s0 + n), g, cols);
    const Tensor dys = dy.rows(s0, s0 + n);
    Tensor dyt = dys;  // [OC, n·P]; one sample is already in that layout
    if (n > 1) {
      dyt = reuse(s.gemm_out, Shape{oc, n * pixels}, x.dtype(), x.device());
      swap_leading_dims(dys, dyt, n, oc, pixels);
    }
    gemm(false, true, oc, rows, n * pixels, 1.0, dyt, cols, 1.0, dweight);
    if (!dx.defined()) continue;
    gemm(true, false, rows, n * pixels, oc, 1.0, weight, dyt, 0.0, cols);  // cols ← dcols
    col2im(cols, g, dx.rows(s0, s0 + n));
  }
}

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const kernels::ConvShape& g,
                    const Tensor& y, ConvScratch& scratch) {
  if (backend::conv2d_supported(x, weight, y, g)) {
    backend::conv2d_forward(x, weight, g, y);
  } else {
    HPC_ASSERT(!x.channel_block() && !y.channel_block(), "conv: the lowering needs plain tensors");
    lowered_conv2d_forward(x, weight, g, y, scratch);
  }
  HPC_ASSERT(!bias.defined() || !y.channel_block(), "conv: a bias needs a plain output");
  if (bias.defined()) add_bias(y, bias, out_channels(weight, g), g.out_pixels());
}

void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const kernels::ConvShape& g,
                     const Tensor& dweight, const Tensor& dbias, const Tensor& dx, ConvScratch& scratch) {
  if (dbias.defined()) bias_grad(dy, dbias, out_channels(weight, g), g.out_pixels());
  // The gradients share their tensors' layout, except dx, which is checked on its own.
  if (backend::conv2d_supported(x, weight, dy, g) &&
      (!dx.defined() || backend::conv2d_supported(dx, dweight, dy, g))) {
    backend::conv2d_backward(x, weight, dy, g, dweight, dx);
  } else {
    HPC_ASSERT(!x.channel_block() && !dy.channel_block(), "conv: the lowering needs plain tensors");
    lowered_conv2d_backward(x, weight, dy, g, dweight, dx, scratch);
  }
}

}  // namespace hpc::nn
