// 2-D convolution lowered to column matrices and matrix products, built from
// backend ops only (im2col, gemm, swap_leading_dims, col2im), so it runs on
// the device of its tensors. Conv2d uses it wherever the device's
// convolution library does not take the tensors (backend::conv2d_supported:
// float64 or a CPU build without oneDNN, a parameter view cuDNN cannot align); it is
// also the reference the library paths are tested against.
//
// Same tensors and contract as backend::conv2d_forward/backward: no bias
// (the layer adds it), backward ADDS into dweight and writes dx unless it is
// undefined.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/conv_math.h"

namespace hpc::nn {

// Memory the lowering reuses from call to call (one per layer): its column
// buffers, bounded by the column budget.
struct ConvScratch {
  Tensor cols, gemm_out;
  // 4 MiB of float columns: large enough for a wide GEMM, small enough to stay in L3
  // while the GEMM reads it (measured best of 2^18..2^22 on CIFAR/MNIST-sized layers).
  int64_t column_budget = int64_t(1) << 20;
};

void lowered_conv2d_forward(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g,
                            const Tensor& y, ConvScratch& scratch);
void lowered_conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const kernels::ConvShape& g, const Tensor& dweight, const Tensor& dx,
                             ConvScratch& scratch);

// The convolution as Conv2d runs it: the library op where
// backend::conv2d_supported says so, else the lowering; then the bias
// (bias / dbias [OC] may be undefined). backward ADDS into dweight and dbias.
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const kernels::ConvShape& g,
                    const Tensor& y, ConvScratch& scratch);
void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const kernels::ConvShape& g,
                     const Tensor& dweight, const Tensor& dbias, const Tensor& dx, ConvScratch& scratch);

}  // namespace hpc::nn
