// DistributedSampler: which samples each rank sees, as a pure function of
// (seed, epoch, position).
//
// The epoch order is a permutation of [0, N) drawn from (seed, epoch). A
// "global batch" is batch_per_rank × world consecutive positions of that
// order; rank r takes the r-th slice of batch_per_rank positions. So the only
// state a checkpoint needs is (seed, epoch, consumed_samples), resuming
// mid-epoch is exact, and a different world size with the same global batch
// sees exactly the same global batches.
//
// The tail of an epoch that does not fill a global batch is dropped
// (PadMode::Drop, training default), wrapped around to the start of the
// order (PadMode::Wrap, training with data.drop_last = false), or padded and
// masked (PadMode::Mask, evaluation: every sample counted exactly once).
#pragma once

#include <cstdint>
#include <vector>

namespace hpc::data {

enum class PadMode { Drop, Wrap, Mask };

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t batch_per_rank, int world, int rank, uint64_t seed,
                     bool shuffle, PadMode pad);

  int64_t global_batch() const { return batch_ * world_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // This rank's indices for global batch `batch` (0-based) of `epoch`, written
  // to out[0, batch_per_rank). Returns how many are real samples; the rest
  // (PadMode::Mask only) are padding that the caller masks out.
  int64_t indices(int64_t epoch, int64_t batch, int64_t* out) const;

 private:
  const std::vector<int64_t>& order(int64_t epoch) const;

  int64_t size_, batch_;
  int world_, rank_;
  uint64_t seed_;
  bool shuffle_;
  PadMode pad_;
  int64_t batches_per_epoch_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace hpc::data
