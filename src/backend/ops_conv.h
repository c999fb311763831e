// 2-D convolution as backend ops, so that each device uses its best method:
// cuDNN on the GPU (algorithm chosen once per shape and cached, workspace
// bounded; backend/cuda/conv_cudnn.cpp), and on the CPU the lowering to
// im2col + one GEMM per chunk of samples that nn::Conv2d used to do itself
// (ops_conv.cpp; the same calls in the same order, so CPU results are
// unchanged bit for bit).
//
// weight is [OC, C, k, k] (OC = weight.count() / g.col_rows()), x is
// [n, C, H, W], y and dy are [n, OC, Ho, Wo]; bias / dbias ([OC]) may be
// undefined. backward ADDS into dweight and dbias (gradient accumulation)
// and writes dx unless it is undefined.
#pragma once

#include <cstdint>

#include "backend/ops_nn.h"
#include "core/tensor.h"

namespace hpc::backend {

// Memory a convolution reuses from call to call (one per layer). The CPU
// path keeps its column buffers here; the column budget bounds them.
struct ConvScratch {
  Tensor cols, gemm_out;
  // 4 MiB of float columns: large enough for a wide GEMM, small enough to stay in L3
  // while the GEMM reads it (measured best of 2^18..2^22 on CIFAR/MNIST-sized layers).
  int64_t column_budget = int64_t(1) << 20;
};

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeometry& g,
                    const Tensor& y, ConvScratch& scratch);
void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const ConvGeometry& g,
                     const Tensor& dweight, const Tensor& dbias, const Tensor& dx, ConvScratch& scratch);

}  // namespace hpc::backend
