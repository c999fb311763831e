// DistributedSampler (see the header for the contract).
#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace hpc::data {

namespace {
// Random stream of epoch e's permutation; distinct from the streams used for initialisation.
constexpr uint64_t SHUFFLE_STREAM = 0x5348554646ull << 24;  // "SHUFF"
}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t batch_per_rank, int world, int rank,
                                       uint64_t seed, bool shuffle, PadMode pad, const std::string& what)
    : size_(dataset_size),
      batch_(batch_per_rank),
      world_(world),
      rank_(rank),
      seed_(seed),
      shuffle_(shuffle),
      pad_(pad) {
  HPC_ASSERT(size_ > 0 && batch_ > 0 && world_ > 0 && 0 <= rank_ && rank_ < world_, "sampler arguments");
  const int64_t g = global_batch();
  batches_per_epoch_ = pad_ == PadMode::Drop ? size_ / g : (size_ + g - 1) / g;
  // Training on less than one global batch would train on padding or on
  // repeats; evaluation (unshuffled, masked) is exact at any size.
  if (size_ < g && (shuffle_ || pad_ != PadMode::Mask))
    throw UserError(what + " has " + std::to_string(size_) + " samples, fewer than one global batch of " +
                    std::to_string(g) + " (" + std::to_string(batch_) + " per rank × " +
                    std::to_string(world_) + (world_ == 1 ? " rank" : " ranks") +
                    "): lower --train.batch_size or --train.accum_steps, or use fewer ranks");
}

std::shared_ptr<const std::vector<int64_t>> DistributedSampler::order(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (int i = 0; i < 2; ++i)
    if (cache_epoch_[i] == epoch) return cache_[i];
  auto ord = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(size_));
  std::iota(ord->begin(), ord->end(), int64_t{0});
  if (shuffle_) {
    Rng rng(seed_, SHUFFLE_STREAM + static_cast<uint64_t>(epoch));
    for (int64_t i = size_ - 1; i > 0; --i)  // Fisher–Yates
      std::swap((*ord)[static_cast<size_t>(i)], (*ord)[rng.below(static_cast<uint64_t>(i + 1))]);
  }
  // Replace the older entry: the epoch being finished and the next one stay.
  const int slot = cache_epoch_[0] < cache_epoch_[1] ? 0 : 1;
  cache_epoch_[slot] = epoch;
  cache_[slot] = std::move(ord);
  return cache_[slot];
}

int64_t DistributedSampler::indices(int64_t epoch, int64_t batch, int64_t* out) const {
  return indices(epoch, batch, 0, batch_, out);
}

int64_t DistributedSampler::indices(int64_t epoch, int64_t batch, int64_t first, int64_t count,
                                    int64_t* out) const {
  HPC_ASSERT(0 <= batch && batch < batches_per_epoch_, "sampler batch out of range");
  HPC_ASSERT(0 <= first && count >= 0 && first + count <= batch_, "sampler rows out of range");
  const std::shared_ptr<const std::vector<int64_t>> keep = order(epoch);
  const std::vector<int64_t>& ord = *keep;
  const int64_t begin = batch * global_batch() + rank_ * batch_ + first;
  int64_t valid = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = begin + i;
    if (pos < size_) {
      out[i] = ord[static_cast<size_t>(pos)];
      ++valid;
    } else if (pad_ == PadMode::Wrap) {
      out[i] = ord[static_cast<size_t>(pos % size_)];
      ++valid;
    } else {
      out[i] = ord[0];  // padding: a real sample so the batch is well-formed, masked by the caller
    }
  }
  return valid;
}

int64_t DistributedSampler::global_valid(int64_t batch) const {
  HPC_ASSERT(0 <= batch && batch < batches_per_epoch_, "sampler batch out of range");
  if (pad_ != PadMode::Mask) return global_batch();
  return std::min(global_batch(), size_ - batch * global_batch());
}

SamplerCursor DistributedSampler::cursor_at(int64_t epoch, int64_t consumed) const {
  const int64_t g = global_batch();
  const int64_t epoch_samples = batches_per_epoch_ * g;
  if (epoch < 0 || consumed < 0 || consumed > epoch_samples)
    throw UserError("cannot resume the data order: position " + std::to_string(consumed) + " of epoch " +
                    std::to_string(epoch) + " is outside the epoch (" + std::to_string(epoch_samples) +
                    " samples in " + std::to_string(batches_per_epoch_) + " global batches)");
  if (consumed % g != 0)
    throw UserError("cannot resume the data order exactly: " + std::to_string(consumed) +
                    " samples of the epoch were consumed, not a whole number of global batches of " +
                    std::to_string(g) + " (batch_size × ranks × accum_steps changed since the checkpoint)");
  if (consumed == epoch_samples) return {epoch + 1, 0};
  return {epoch, consumed / g};
}

}  // namespace hpc::data
