// Raw device and pinned host memory for Tensor: the seam between core and
// the backend.
//
// core declares what a device tensor needs and the backend defines it
// (backend/cuda/device.cpp; backend/nocuda/device.cpp in a CPU-only build,
// which refuses), so that core includes nothing from backend/ and knows
// nothing of CUDA, and the link decides which implementation a program gets.
#pragma once

#include <cstddef>

namespace hpc {

// Zero-filled device memory on the current device (Tensor's contract). An
// out-of-memory is a UserError (exit 2) naming the request, what hpctrain
// already holds and its largest allocation, with the usual hint.
void* device_alloc(size_t num_bytes);
void device_free(void* p);  // nullptr: no-op

// Page-locked host memory, which the GPU can copy from asynchronously;
// nullptr when none can be had (CPU-only build, no GPU): use plain memory then.
void* pinned_alloc(size_t num_bytes);
void pinned_free(void* p);

}  // namespace hpc
