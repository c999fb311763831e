// Shard boundaries (see shards.h).
#include "dist/shards.h"

#include <algorithm>

#include "core/error.h"

namespace hpc::dist {

std::vector<int64_t> shard_bounds(int64_t n, int world, int64_t align) {
  HPC_ASSERT(n >= 0 && world >= 1 && align >= 1, "shard_bounds: arguments");
  const int64_t blocks = (n + align - 1) / align;
  std::vector<int64_t> out(static_cast<size_t>(world) + 1);
  for (int r = 0; r <= world; ++r) out[static_cast<size_t>(r)] = std::min(n, blocks * r / world * align);
  return out;
}

std::vector<int64_t> shard_bounds_within(const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
  HPC_ASSERT(begin <= end, "shard_bounds_within: range");
  std::vector<int64_t> out(bounds.size());
  for (size_t i = 0; i < bounds.size(); ++i) out[i] = std::clamp(bounds[i], begin, end) - begin;
  return out;
}

}  // namespace hpc::dist
