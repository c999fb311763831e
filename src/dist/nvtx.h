// NVTX ranges: the trace's phases (train/trace.h) as named ranges on this
// thread's timeline, so Nsight Systems shows the step, data wait, forward,
// backward, gradient wait, optimizer… next to the kernels and NCCL calls.
// GPU builds: NVTX 3 (header-only, dist/cuda/nvtx.cu; costs nothing without
// a profiler attached); CPU-only builds: no-ops (dist/nocuda/nvtx.cpp).
#pragma once

namespace hpc::dist {

// Opens a range named `name` on the calling thread (the name is copied).
void nvtx_push(const char* name);
// Closes the innermost range this thread opened.
void nvtx_pop();

}  // namespace hpc::dist
