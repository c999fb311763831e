// The ZeRO partition of a flat buffer (dist.zero = 1 | 2).
//
// Rank r owns elements [bounds[r], bounds[r+1]) of the flat parameter
// buffer, and with it the same range of the gradients, the master weights
// and the optimizer state. Boundaries fall on multiples of SHARD_ALIGN
// elements (64 bytes of float32: a cache line, an AVX-512 vector, the CPU
// reductions' 16 lanes), except the end; shards differ by at most one
// aligned block, and a rank may own nothing when the buffer is small.
// A bucket of the gradient buffer is cut by the same boundaries
// (shard_bounds_within), so a reduce-scatter of each bucket leaves each
// rank exactly its shard.
#pragma once

#include <cstdint>
#include <vector>

namespace hpc::dist {

constexpr int64_t SHARD_ALIGN = 16;

// world + 1 offsets from 0 to n.
std::vector<int64_t> shard_bounds(int64_t n, int world, int64_t align = SHARD_ALIGN);

// The bounds restricted to [begin, end), relative to begin: how a slice is shared out.
std::vector<int64_t> shard_bounds_within(const std::vector<int64_t>& bounds, int64_t begin, int64_t end);

}  // namespace hpc::dist
