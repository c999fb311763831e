// Between a model + optimizer and a Checkpoint: deep copies in both
// directions, and the choice of the checkpoint that --resume names.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/shard_stream.h"
#include "ckpt/validate.h"
#include "nn/model.h"
#include "optim/optimizer.h"

namespace hpc::ckpt {

// What a capture does with host float32 state: Copy it (the model goes on
// training while the snapshot is written: an asynchronous save), or Borrow
// it (views of the live tensors: the caller writes the snapshot before
// anything changes them, a synchronous save, and so adds no memory).
// 16-bit or device tensors are always converted into host copies.
enum class Snapshot { Copy, Borrow };

// Copies the parameters (with one ParamEntry per tensor), BatchNorm buffers,
// optimizer state and step counter into `c`, as host float32 copies (so the
// model may go on training while `c` is written), or as views (Borrow). `params` is the flat
// buffer that holds the trained values in full precision: the optimizer's
// (a 16-bit model's fp32 master weights, else the model's own). Tensors may
// live on the GPU and be 16-bit; they are converted on their device first.
// Host tensors already in `c` of the right size (an earlier snapshot's) are
// reused: the asynchronous writer hands its finished snapshot back for this.
void capture(const Tensor& params, nn::Model& model, optim::Optimizer& optimizer, Checkpoint& c,
             Snapshot how = Snapshot::Copy);
// A model split over a tensor-parallel group: the unsplit model's flat parameters and optimizer state
// (host float32, put together from every rank's parts by the trainer, train/tp_state.h), taken as
// they are; the entries are the unsplit ones (ParamInfo::full_offset, full_shape).
void capture_unsplit(const Tensor& params, nn::Model& model, std::vector<NamedTensor> state,
                     int64_t optimizer_steps, Checkpoint& c);
// Saving from shards (several ranks, ckpt/shard_stream.h): rank 0's checkpoint holds everything but
// the flat datasets, of which it keeps the names and the length (Checkpoint::streamed_count), and
// every rank's ShardSnapshot its range [bounds[rank], bounds[rank + 1]) of them. capture_shard takes
// that range of `params` and of the optimizer's state, which are either whole (and sliced here) or
// exactly the range (ZeRO); host float32 copies, into the tensors `s` already has when they fit
// (or, Snapshot::Borrow, views of the live range).
void capture_layout(nn::Model& model, optim::Optimizer& optimizer, Checkpoint& c);
void capture_shard(const Tensor& params, optim::Optimizer& optimizer, const std::vector<int64_t>& bounds,
                   int rank, ShardSnapshot& s, Snapshot how = Snapshot::Copy);

// Copies `c` into `params` (as above), the model's buffers and the optimizer
// (after check_resumable passed), converting to each tensor's dtype and
// device. A 16-bit model's own parameters are then the caller's to refresh
// from the master weights (MixedPrecision::publish).
void restore(const Checkpoint& c, const Tensor& params, nn::Model& model, optim::Optimizer& optimizer);
// Only the model's buffers (ZeRO: the sharded parameters and state go to each rank by its shard).
void restore_buffers(const Checkpoint& c, nn::Model& model);
// The checkpoint's whole-buffer optimizer state `name` (validated to exist before restore).
const Tensor& optimizer_state_of(const Checkpoint& c, const std::string& name);
// Its flat dataset's number in a FlatSource of `c` (1 + its index in c.optimizer_state).
size_t flat_dataset_of(const Checkpoint& c, const std::string& name);

// A host float32 copy of t, from any device and float dtype (16-bit is converted on its own
// device: the CPU backend has no 16-bit types). From a GPU the copy lands in pinned memory (plain
// memory when none can be had): the device→host copy is then DMA without a staging buffer, and the
// asynchronous writer hands the snapshot back, so it is pinned once.
Tensor host_f32(const Tensor& t);
// dst (any device and float dtype) ← the host float32 values of src; `name` for the error.
void assign(const Tensor& dst, const Tensor& src, const std::string& name);

// The current model and optimizer as a RunLayout (the rest is the caller's).
RunLayout layout_of(nn::Model& model, optim::Optimizer& optimizer, const std::string& optimizer_name);

struct Resume {
  Checkpoint checkpoint;
  std::string path;
  // FlatData::Verify: the file's flat datasets, to be streamed to their owners (null with Load).
  std::unique_ptr<FlatFileSource> flat;
};

// What --resume asks for: "" → nothing; PATH → that file (any failure is a
// UserError); auto → the newest valid checkpoint in run_dir, skipping damaged
// ones (each reported in `log`); nothing when run_dir holds no checkpoint at
// all. Checkpoints present but none valid is a UserError: starting over
// silently would throw away the run they belong to. flat: Verify leaves the
// parameters and optimizer state in the file (Resume::flat reads them).
std::optional<Resume> locate_resume(const std::string& resume, const std::string& run_dir,
                                    std::vector<std::string>& log, FlatData flat = FlatData::Load);

}  // namespace hpc::ckpt
