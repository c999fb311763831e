// HD marks per-element math that both CUDA kernels and the CPU backend call,
// so that the CPU unit tests test the GPU's arithmetic too.
#pragma once

#if defined(__CUDACC__)
#define HD __host__ __device__ __forceinline__
#else
#define HD inline
#endif
