// What hpctrain's own allocations hold, by what they are for: the per-rank
// memory that the start-up memory model predicts (train/memory_model.h),
// measured, so that a test can hold the one against the other.
//
// Every Buffer (core/tensor.h: host, pinned or device memory) is counted
// under the use that was current on its thread when it was allocated
// (MemUseScope), and uncounted when it is freed; a use keeps its bytes now
// and its peak. Borrowed memory (an mmapped dataset) is nobody's allocation
// and is not counted. The ledger remembers each allocation's use by its
// address (one map under a mutex): allocations happen at set-up and at most
// a few times a step.
#pragma once

#include <cstddef>

namespace hpc {

enum class MemUse {
  Other,           // activations, scratch, loader buffers, snapshots: everything not named below
  Params,          // the model's parameters (the whole flat buffer, or with dist.zero 3 its shard)
  Grads,           // gradients: the flat buffer (or its shard), fp32 gradients of a 16-bit model
  OptimizerState,  // the optimizer's moments and a 16-bit model's fp32 master weights
  GatherBuffers,   // dist.zero 3: the buffers units are gathered into
  GradStaging,     // dist.zero 3 (and 2 on GPUs): a unit's or bucket's gradients until reduce-scattered
};
constexpr int NUM_MEM_USES = 6;
const char* mem_use_name(MemUse use);

struct MemUseStats {
  size_t in_use = 0, peak = 0;
};
MemUseStats mem_use_stats(MemUse use);
// Every use's peak back to what it holds now (to measure one phase).
void reset_mem_use_peaks();

// Allocations made on this thread while it lives count to `use` (scopes nest; the innermost wins).
class MemUseScope {
 public:
  explicit MemUseScope(MemUse use);
  ~MemUseScope();
  MemUseScope(const MemUseScope&) = delete;
  MemUseScope& operator=(const MemUseScope&) = delete;

 private:
  MemUse previous_;
};

// For Buffer: p (bytes long) was allocated under this thread's current use; p is freed.
void mem_use_add(const void* p, size_t bytes);
void mem_use_remove(const void* p);

}  // namespace hpc
