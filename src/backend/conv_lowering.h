// 2-D convolution lowered to column matrices and matrix products: the
// device-generic method behind the convolution ops (ops.def). It calls only
// public backend ops, so it runs on the device of its tensors: it is the
// CPU's method, and the GPU's for tensors cuDNN does not take. How it works
// is in conv_lowering.cpp.
//
// The CPU implementation calls it today; a faster CPU library (oneDNN) would
// sit in front of it there, keeping it as the fallback and the reference.
// Same parameters and contract as the convolution ops.
#pragma once

#include "backend/ops.h"

namespace hpc::backend {

void lowered_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const kernels::ConvShape& g, const Tensor& y, ConvScratch& scratch);
void lowered_conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const kernels::ConvShape& g, const Tensor& dweight, const Tensor& dbias,
                             const Tensor& dx, ConvScratch& scratch);

}  // namespace hpc::backend
