// DistributedSampler (see the header for the contract).
#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace hpc::data {

namespace {
// Random stream of epoch e's permutation; distinct from the streams used for initialisation.
constexpr uint64_t SHUFFLE_STREAM = 0x5348554646ull << 24;  // "SHUFF"
}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t batch_per_rank, int world, int rank,
                                       uint64_t seed, bool shuffle, PadMode pad)
    : size_(dataset_size), batch_(batch_per_rank), world_(world), rank_(rank), seed_(seed),
      shuffle_(shuffle), pad_(pad) {
  HPC_ASSERT(size_ > 0 && batch_ > 0 && world_ > 0 && 0 <= rank_ && rank_ < world_, "sampler arguments");
  const int64_t g = global_batch();
  batches_per_epoch_ = pad_ == PadMode::Drop ? size_ / g : (size_ + g - 1) / g;
  if (batches_per_epoch_ == 0)
    throw UserError("the dataset has " + std::to_string(size_) + " samples, fewer than one global batch of " +
                    std::to_string(g) + " (batch_size " + std::to_string(batch_) + " × " +
                    std::to_string(world_) + " ranks): lower --train.batch_size or set --data.drop_last false");
}

const std::vector<int64_t>& DistributedSampler::order(int64_t epoch) const {
  if (epoch == cached_epoch_) return order_;
  order_.resize(static_cast<size_t>(size_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (shuffle_) {
    Rng rng(seed_, SHUFFLE_STREAM + static_cast<uint64_t>(epoch));
    for (int64_t i = size_ - 1; i > 0; --i)  // Fisher–Yates
      std::swap(order_[static_cast<size_t>(i)], order_[rng.below(static_cast<uint64_t>(i + 1))]);
  }
  cached_epoch_ = epoch;
  return order_;
}

int64_t DistributedSampler::indices(int64_t epoch, int64_t batch, int64_t* out) const {
  HPC_ASSERT(0 <= batch && batch < batches_per_epoch_, "sampler batch out of range");
  const std::vector<int64_t>& ord = order(epoch);
  const int64_t first = batch * global_batch() + rank_ * batch_;
  int64_t valid = 0;
  for (int64_t i = 0; i < batch_; ++i) {
    int64_t pos = first + i;
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

}  // namespace hpc::data
