// DistributedSampler: which samples each rank sees, as a pure function of
// (seed, epoch, position).
//
// The epoch order is a permutation of [0, N) drawn from (seed, epoch). A
// "global batch" is batch_per_rank × world consecutive positions of that
// order; rank r takes the r-th slice of batch_per_rank positions. So the only
// state a checkpoint needs is (seed, epoch, consumed_samples), resuming
// mid-epoch is exact, and a different world size with the same global batch
// sees exactly the same global batches. cursor_at() maps consumed_samples
// back to a batch; a changed global batch continues exactly when the
// position is a multiple of it, and is a UserError otherwise.
//
// The tail of an epoch that does not fill a global batch is dropped
// (PadMode::Drop, training default), wrapped around to the start of the
// order (PadMode::Wrap), or padded and masked (PadMode::Mask: the padding
// rows are reported as not valid, so no sample is counted twice; training
// with data.drop_last = false and evaluation use it). In every mode all
// ranks run the same number of batches.
//
// A shuffled sampler, and every Drop or Wrap one, refuses a dataset smaller
// than one global batch (UserError); an unshuffled Mask sampler (evaluation)
// accepts any size.
//
// indices() may be called from several threads at once (loader workers): the
// permutations of the two most recent epochs are cached behind a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hpc::data {

enum class PadMode { Drop, Wrap, Mask };

// A position in the stream of global batches.
struct SamplerCursor {
  int64_t epoch = 0, batch = 0;
  bool operator==(const SamplerCursor&) const = default;
};

class DistributedSampler {
 public:
  // `what` names the data in the too-small error ("data file 'x.h5': /train").
  DistributedSampler(int64_t dataset_size, int64_t batch_per_rank, int world, int rank, uint64_t seed,
                     bool shuffle, PadMode pad, const std::string& what = "the dataset");

  int64_t size() const { return size_; }
  int64_t batch_per_rank() const { return batch_; }
  int64_t global_batch() const { return batch_ * world_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // This rank's indices for global batch `batch` (0-based) of `epoch`, written
  // to out[0, batch_per_rank). Returns how many are real samples; the rest
  // (PadMode::Mask only) are padding that the caller masks out.
  int64_t indices(int64_t epoch, int64_t batch, int64_t* out) const;
  // Rows [first, first + count) of the same (one micro-batch of a gradient
  // accumulation step); returns how many of those are real samples.
  int64_t indices(int64_t epoch, int64_t batch, int64_t first, int64_t count, int64_t* out) const;
  // Real samples in global batch `batch` over all ranks: global_batch(),
  // except for a padded (Mask) last batch.
  int64_t global_valid(int64_t batch) const;

  // Samples of epoch `at.epoch`'s order consumed before `at` (all ranks):
  // at.batch × global_batch(). With the epoch, this is the sampler state a
  // checkpoint stores.
  int64_t consumed_samples(SamplerCursor at) const { return at.batch * global_batch(); }
  // The inverse: where to continue after `consumed` samples of `epoch`'s
  // order. Any world size and micro-batch split works as long as the
  // position is a whole number of this sampler's global batches (always true
  // when the global batch is unchanged); then the sample sequence continues
  // exactly. Otherwise throws UserError naming both numbers. The end of an
  // epoch is the start of the next.
  SamplerCursor cursor_at(int64_t epoch, int64_t consumed) const;

 private:
  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) const;

  int64_t size_, batch_;
  int world_, rank_;
  uint64_t seed_;
  bool shuffle_;
  PadMode pad_;
  int64_t batches_per_epoch_;
  mutable std::mutex cache_mutex_;
  mutable std::shared_ptr<const std::vector<int64_t>> cache_[2];  // two epochs: loaders cross epoch ends
  mutable int64_t cache_epoch_[2] = {-1, -1};
};

}  // namespace hpc::data
