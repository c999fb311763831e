// Convolution lowering and pooling kernels: im2col / col2im, the
// leading-dimension swap, max/average pooling and global average pooling.
// Launchers only; kernels in lowering.cu, bodies in conv_math.h and
// pool_math.h (which the CPU tests run over every index).
//
// The cuDNN path (backend/cuda/conv_cudnn.cpp) does not use these; they
// give the CUDA backend the same ops as the CPU one, so a layer written
// against im2col + GEMM also runs on the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cast_math.h"
#include "kernels/conv_math.h"
#include "kernels/pool_math.h"

namespace hpc::kernels {

template <typename T>
void im2col(const T* x, T* cols, const ConvShape& g, cudaStream_t stream);
template <typename T>
void col2im(const T* cols, T* dx, const ConvShape& g, cudaStream_t stream);
// dst [b, a, inner] = src [a, b, inner]
template <typename T>
void swap_leading_dims(const T* src, T* dst, int64_t a, int64_t b, int64_t inner, cudaStream_t stream);

template <typename T>
void max_pool_forward(const T* x, T* y, int32_t* argmax, const PoolShape& g, cudaStream_t stream);
template <typename T>
void max_pool_backward(const T* dy, const int32_t* argmax, T* dx, const PoolShape& g, cudaStream_t stream);
template <typename T>
void avg_pool_forward(const T* x, T* y, const PoolShape& g, cudaStream_t stream);
template <typename T>
void avg_pool_backward(const T* dy, T* dx, const PoolShape& g, cudaStream_t stream);
// y[r] = mean of x[r, 0:spatial]; dx[r, :] = dy[r]/spatial.
template <typename T>
void spatial_mean_forward(const T* x, T* y, int64_t rows, int64_t spatial, cudaStream_t stream);
template <typename T>
void spatial_mean_backward(const T* dy, T* dx, int64_t rows, int64_t spatial, cudaStream_t stream);

}  // namespace hpc::kernels
