// ZeRO in the trainer (dist.zero = 1 | 2 | 3): which part of the flat buffers
// this rank owns, the global gradient norm, and moving sharded state to and
// from the one checkpoint writer. (Stage 3, where the model itself stores
// only the shard and gathers units as layers need them, is
// dist/sharded_params.h; the ranges and the norm here are the same.)
//
// Rank r owns elements [lo, hi) of the flat parameter buffer
// (dist::shard_bounds): its master weights (16-bit runs), the reduced
// gradients of that range and the optimizer state exist for it only. Every
// per-element rule (clipping's scale, the optimizer) then computes on the
// shard exactly what it computes there unsharded, and the rank-ordered
// reduce-scatter gives the shard the allreduce's bits; what remains is the
// one reduction over all elements, the gradient norm.
//
// The gradient norm is defined shard-wise for every dist.zero: Σ over ranks
// q, in rank order, of the sum of squares of shard q (each summed by the
// backend like any buffer; boundaries aligned to its 16 lanes). Unsharded,
// one rank computes all of them; sharded, each rank its own and a 1-double
// allgather brings the others; both fold the same doubles in the same order,
// so grad_norm and the clipping factor are the same bits. With one rank the
// definition is the plain sum of squares. On the GPU unsharded the norm is
// one reduction of the whole buffer (world-size reads back would cost more
// than the bits are worth there; the GPU is not bitwise across stages anyway).
//
// Checkpoints keep one layout: full-size datasets written by rank 0, from
// every rank's snapshot of its shard, a chunk at a time (ckpt/shard_stream.h,
// at every dist.zero). Resuming, rank 0 verifies the file chunk by chunk, then
// reads each rank's range of it, a chunk at a time, and sends it there.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/tensor.h"
#include "dist/communicator.h"

namespace hpc::train {

class Sharding {
 public:
  // stage: dist.zero; with one rank every stage runs unsharded.
  Sharding(int stage, int rank, int world, int64_t num_params, Device device);

  int stage() const { return active() ? stage_ : 0; }
  bool active() const { return stage_ > 0 && world_ > 1; }
  int64_t lo() const { return active() ? bounds_[static_cast<size_t>(rank_)] : 0; }
  int64_t hi() const { return active() ? bounds_[static_cast<size_t>(rank_) + 1] : num_params_; }
  int64_t count() const { return hi() - lo(); }
  // world + 1 offsets (dist::shard_bounds), also when not active (they define the norm).
  const std::vector<int64_t>& bounds() const { return bounds_; }
  // The info line for dist.zero > 0 with one rank ("" otherwise).
  std::string note() const;

  // Stage 2 on the CPU: a rank keeps only its shard of the reduced gradients. The reducer returns
  // the rest of each bucket's pages as the bucket completes (dist::GradReducer::release_reduced);
  // between steps only the own shard of the flat gradient buffer is resident. (On a GPU the buffer
  // stays whole: device memory has no per-page release here.)
  bool keeps_own_grads_only() const { return stage() == 2 && device_ == Device::CPU; }
  // Clears the flat gradient buffer before a step: all of it, or with keeps_own_grads_only() the
  // own shard, the rest zeroed by handing its pages back (so clearing does not touch them again).
  void zero_grads(const Tensor& grads) const;

  // The global L2 norm of the gradients: grads is the own shard when active, else the whole buffer.
  // Every rank must call (active: one allgather on host).
  double grad_norm(const Tensor& grads, dist::Communicator& host) const {
    return std::sqrt(grad_squares(grads, host));
  }
  // Its square, leaving out the elements of the `skip` ranges ([begin, end) of the layout, ascending:
  // a pipeline stage's copies of tied parameters, which their owners count).
  double grad_squares(const Tensor& grads, dist::Communicator& host,
                      const std::vector<std::pair<int64_t, int64_t>>& skip = {}) const;

  // `mine` ← this rank's range of flat dataset k of rank 0's checkpoint file `source` (ignored elsewhere):
  // rank 0 reads each rank's range ckpt::CHUNK_ELEMS at a time and sends it (reading the next piece
  // while one is on its way), so no rank holds more than its shard and two pieces. Every rank calls.
  void scatter_from_root(ckpt::FlatSource* source, size_t k, const Tensor& mine,
                         dist::Communicator& host) const;

 private:
  int stage_, rank_, world_;
  int64_t num_params_;
  Device device_;
  std::vector<int64_t> bounds_;
};

}  // namespace hpc::train
