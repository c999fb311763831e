// Tensor parallelism in the trainer: the tp group's collectives for the
// layers, the gradient norm and the sum of partial gradients, and moving
// state between a rank's parts and the unsplit model.
//
// nn knows no communicator (docs/architecture.md, "Layers"), so CommTp binds
// nn::TpComm to the grid's tp group. Every reduction is the communicator's:
// rank-ordered on MPI (the same bits on every rank, whatever the group's
// size), ncclAllReduce on GPUs (also the same on every rank), stream-ordered
// there (allreduce_before_compute).
//
// A checkpoint holds the unsplit model (one portable file: any tp resumes it,
// export reads it unchanged). A rank's flat buffers hold its parts of the
// split parameters (nn::ParamInfo::shard) and whole copies of the replicated
// ones, so:
//   save    each rank of the first replica's tp group sends its flat state and
//           the description of its parts to tp rank 0 (world rank 0), which
//           puts them into unsplit tensors, one rank at a time;
//   resume  rank 0 reads the unsplit tensors from the file one parameter at a
//           time and broadcasts each, and every rank takes its parts
//           (take_parts_of): no rank holds more than one unsplit tensor.
//
// The gradient norm is that of the unsplit model: Σ over the tp group of the
// split parameters' squares plus the replicated ones' once (they are equal on
// every rank of the group), each summed per data-parallel shard as
// Sharding::grad_norm does (the same bits for every dist.zero). It is not the
// unsplit run's bits (another order of summation) but equal to ~1e-15
// relative.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "nn/model.h"
#include "nn/tensor_parallel.h"
#include "train/sharding.h"

namespace hpc::train {

// Counts what it moves (elements sent per rank: an all-reduce of n counts n) and the host time
// its calls take, for the end-of-run line and bench/tp.sh.
class CommTp final : public nn::TpComm {
 public:
  struct Traffic {
    int64_t calls = 0;
    double elements = 0, seconds = 0;
  };
  explicit CommTp(dist::Communicator& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void sum(const Tensor& t) override;
  void max(const Tensor& t) override;
  void gather(const Tensor& part, const Tensor& full) override;
  void sum_scatter(const Tensor& full, const Tensor& part) override;
  const Traffic& traffic() const { return traffic_; }

 private:
  void count(int64_t elements, double t0);
  dist::Communicator& comm_;
  Traffic traffic_;
};

// full (host float32, num_full_params) ← this rank's parts in local (host float32, num_params).
void put_parts(const nn::Model& model, const Tensor& local, const Tensor& full);
// local ← this rank's parts of one unsplit parameter: `tensor` (host float32, its full shape) is
// the one at full_offset of the unsplit layout; the parameters of `model` that are (part of) it
// take theirs, none if this rank (a pipeline stage) holds none of it.
void take_parts_of(const nn::Model& model, int64_t full_offset, const Tensor& tensor, const Tensor& local);

// Called by every rank of one tp group with its whole flat `local` (host float32): tp rank 0 gets the
// unsplit flat tensor, the others an undefined one.
Tensor gather_unsplit(const nn::Model& model, const Tensor& local, dist::Communicator& tp);

// The global gradient norm of a split model: grads is this rank's shard when sharding is active,
// else the whole buffer; the shards' parts (of the dp group) fold in shard order, as
// Sharding::grad_norm's do, so that every dist.zero gives the same bits.
double tp_grad_norm(const nn::Model& model, const Tensor& grads, const Sharding& sharding,
                    dist::Communicator& dp, dist::Communicator& tp);
// Its square, without a pipeline stage's tied copies (their owners count them).
double tp_grad_squares(const nn::Model& model, const Tensor& grads, const Sharding& sharding,
                       dist::Communicator& dp, dist::Communicator& tp);

// Sequence parallelism: the parameters whose gradient is each rank's part (ParamInfo::tp_partial)
// summed over the tp group, in the range [lo, lo + grads.count()) grads covers.
void sum_partial_grads(const nn::Model& model, const Tensor& grads, int64_t lo, dist::Communicator& tp);

}  // namespace hpc::train
