// Inverted dropout of one element, shared by the CUDA kernel and the CPU
// tests: the same expression as the CPU backend's loop (backend/cpu/nn_ops.cpp),
// so a GPU mask is the CPU mask bit for bit. The mask bit is a pure function
// of (seed, stream, index) (random.h); multiplying by 0 or 1/(1 − p) instead
// of branching keeps the kernel free of divergent branches.
#pragma once

#include <cstdint>

#include "hd.h"
#include "random.h"

namespace hpc::kernels {

// x kept (and scaled by keep_scale = 1/(1 − p)) when random_uniform(seed, stream, index) ≥ p.
template <typename C>
HD C dropout_element(C x, double p, C keep_scale, uint64_t seed, uint64_t stream, uint64_t index) {
  const bool keep = random_uniform(seed, stream, index) >= p;
  return x * (C(keep) * keep_scale);
}

}  // namespace hpc::kernels
