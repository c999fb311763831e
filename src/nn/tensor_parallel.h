// Tensor parallelism as the layers see it (Megatron-LM's scheme: Shoeybi et
// al. 2019; Korthikanti et al. 2022 for the sequence split).
//
// A model built for a tensor-parallel group of T ranks (TpSplit) holds on
// each rank only its part of the layers that split: whole attention heads
// and key/value heads, columns of the MLP's first projections, rows of the
// output projections, rows of the vocabulary. What is split, and how each
// part maps onto the unsplit tensor, is written once per parameter
// (ParamShard): the model initialises each part as its slice of the unsplit
// initialisation (so a split run starts from exactly the unsplit run's
// numbers), and checkpoints gather and scatter full tensors by it.
//
// The vocabulary is padded to a multiple of 128·T so that it splits evenly
// (vocab_split); the padding rows of the embedding are zero, the padded
// logits are excluded from the softmax (they never win) and get no gradient.
//
// The collectives a split layer needs (TpComm) come at run time through
// RunCtx::tp: nn knows no communicator, the trainer binds them to the grid's
// tp group. Every reduction gives the same bits on every rank of the group,
// so the replicated parts (norms, biases of row-split layers, the position
// embedding) get identical gradients without being reduced — except under
// sequence parallelism, where a replicated parameter used on this rank's
// rows only gets this rank's part of its gradient (ParamSpec::tp_partial),
// which the trainer sums over the group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hpc::nn {

// The split a model is built for: its tensor-parallel group's size and this rank's place in it.
struct TpSplit {
  int size = 1, rank = 0;
  // Sequence parallelism: between the split projections, each rank holds 1/size of the batch's rows
  // (a contiguous chunk of its B·T token rows), and the norms, residual adds and dropout run on it.
  bool sequence = false;
  bool active() const { return size > 1; }
  bool sequence_split() const { return active() && sequence; }
};

// The collectives of the tensor-parallel group over tensors on the activations' device.
class TpComm {
 public:
  virtual ~TpComm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place: the sum (the maximum) over the group, the same bits on every rank, complete for the
  // device work queued after the call.
  virtual void sum(const Tensor& t) = 0;
  virtual void max(const Tensor& t) = 0;
  // full [size·n elements] ← every rank's part [n], rank r's at r·n (the sequence's all-gather).
  virtual void gather(const Tensor& part, const Tensor& full) = 0;
  // part [n] ← elements [rank·n, (rank+1)·n) of the sum over the group of full [size·n] (reduce-scatter).
  virtual void sum_scatter(const Tensor& full, const Tensor& part) = 0;
};

// A vocabulary of `vocab` real ids split over a group: padded to a multiple of 128·size, each rank
// holds `shard` consecutive ids from `first` (some of the last rank's may be padding).
struct VocabSplit {
  int64_t vocab = 0, padded = 0, shard = 0, first = 0;
  int64_t real_in_shard() const;  // the shard's ids below vocab
};
VocabSplit vocab_split(int64_t vocab, const TpSplit& tp);
constexpr int64_t VOCAB_ALIGN = 128;

// One contiguous piece of a parameter's part: `length` entries of dimension `dim` from `local` in
// this rank's tensor are entries from `global` of the unsplit tensor's.
struct ShardPiece {
  int64_t local = 0, global = 0, length = 0;
};

// How a parameter of a split layer maps onto the unsplit one (dim < 0: replicated, the whole
// tensor on every rank). Entries of `dim` at or past full[dim] are padding: zero, not stored.
struct ParamShard {
  int dim = -1;
  Shape full;  // the unsplit tensor's shape
  std::vector<ShardPiece> pieces;
  bool split() const { return dim >= 0; }

  // Rank `rank`'s part of a tensor of `full` shape split in `parts` equal blocks along `dim`,
  // the unsplit extent padded to `padded` entries (0: no padding).
  static ParamShard block(const Shape& full, int dim, int parts, int rank, int64_t padded = 0);
  // The part's shape (full with dim's extent = Σ lengths).
  Shape local_shape() const;
  // For each local flat element in order, its flat index in the unsplit tensor, or -1 for padding.
  std::vector<int64_t> global_index() const;
};

// copy part ← its slice of full (full: host, the unsplit tensor's shape; part: host, local shape),
// padding zero; and the inverse, which writes part's real entries into their place in full.
void take_shard(const Tensor& full, const ParamShard& shard, const Tensor& part);
void put_shard(const Tensor& part, const ParamShard& shard, const Tensor& full);

}  // namespace hpc::nn
