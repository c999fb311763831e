// GradReducer: averages the flat gradient buffer across ranks in buckets,
// overlapped with backward (the idea of PyTorch DDP's Reducer).
//
// Buckets are contiguous slices of the flat gradient buffer, cut from its
// END, because backward finishes the last layer's gradients first. A bucket
// ends at a cut point (the trainer passes every parameter's offset, so a
// bucket never splits a tensor) as soon as it holds at least bucket_bytes:
// a tiny bucket_mb gives one bucket per parameter tensor, a huge one a
// single bucket. Without cut points buckets are exactly bucket_bytes. As in
// DDP, the first bucket is capped at 1 MiB, so that communication starts
// early in backward even when one bucket_mb would hold the whole model.
//
// Model::backward reports a frontier after each layer (every gradient at
// offset ≥ frontier is final); each bucket lying wholly above it starts its
// AllReduce at once (buckets ready together start as one group: one
// ncclGroupStart/End on NCCL), and the in-flight ones are advanced, so
// communication runs while earlier layers still compute. finish() starts
// what is left and waits for all. With overlap off, everything starts in
// finish(): the baseline that shows what overlap buys.
//
// On GPUs (NcclComm) "start" and "wait" are stream operations: starting a
// group records an event on the compute stream at that point of backward
// (after the writes of every gradient the group covers) and makes the NCCL
// stream wait for it, so the AllReduce runs beside the rest of backward;
// finish() makes the compute stream wait for each bucket's end event
// (Request::wait_on_device), so the optimizer's kernels, queued next, read
// reduced gradients, and the host never blocks on the device here. On host
// communicators (MPI) wait_on_device() is a plain wait.
//
// Sharded (ZeRO, dist.zero = 1 | 2; dist/shards.h): given the shard bounds
// of the flat buffer, each bucket is reduce-scattered instead (every rank
// ends with the reduced average of its own shard, bitwise what the
// allreduce leaves there), and start_allgather() sends each rank's updated
// parameter shard to every rank, bucket by bucket in forward order (the
// lowest offsets, which the next forward needs first, first), for the next
// forward to wait for layer by layer (params_ready). Stage 2 on the
// CPU also hands back the memory of the gradients outside the own shard as
// each bucket completes (release_reduced).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "dist/communicator.h"

namespace hpc::dist {

class GradReducer {
 public:
  // cut_points: offsets where a bucket may end (empty: anywhere).
  // shard_bounds: reduce-scatter over those shards (empty: allreduce).
  GradReducer(Communicator& comm, const Tensor& grads, double bucket_bytes,
              const std::vector<int64_t>& cut_points = {}, bool overlap = true,
              std::vector<int64_t> shard_bounds = {});

  // Begins a reduction round (the last micro-step of an optimizer step).
  void begin();
  // Called by backward: gradients at offsets ≥ frontier are final.
  void on_ready(int64_t frontier);
  // Starts whatever is left and waits for every bucket (Request::wait_on_device:
  // on the GPU the compute stream waits, not the host). Returns the seconds
  // spent here: on the host, the communication that backward did not hide; on
  // the GPU only the cost of queueing (the wait shows in the next readback).
  double finish();

  // Sharded only: every rank's shard of params (the gradients' layout) to every rank, one
  // all-gather per bucket, started in forward order (the lowest offsets, which the next forward
  // needs first, first). params_ready(end) then waits for the buckets below `end` only (before
  // a layer's forward: its parameters and those of the layers before it), advancing the rest;
  // finish_allgather() waits for all. Waits are wait_on_device: on the GPU the compute stream
  // waits for each bucket's event, so the gathers of later layers run beside earlier layers'
  // forward; on MPI they are host waits, and the gathers progress inside every MPI call.
  void start_allgather(const Tensor& params);
  void params_ready(int64_t end);
  void finish_allgather();
  bool allgather_pending() const { return gathered_ < gathers_.size(); }
  // start_allgather + finish_allgather.
  void allgather_params(const Tensor& params) {
    start_allgather(params);
    finish_allgather();
  }
  bool sharded() const { return !shards_.empty(); }
  // ZeRO stage 2 on host buffers: as each bucket's reduce-scatter completes, the parts of it outside
  // this rank's shard are zeroed and their pages returned to the OS (core/host_pages.h), so a rank
  // keeps only its shard of the reduced gradients. Sharded host gradients only.
  void release_reduced();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // [begin, end) element ranges in launch order (highest offsets first).
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges() const;
  // The bucket plan for n elements (see above); pure, for tests. first_elems: the size
  // of the first bucket (0: bucket_elems).
  static std::vector<std::pair<int64_t, int64_t>> plan(int64_t n, int64_t bucket_elems,
                                                       const std::vector<int64_t>& cut_points,
                                                       int64_t first_elems = 0);
  static constexpr double FIRST_BUCKET_BYTES = 1048576;

 private:
  struct Bucket {
    int64_t begin, end;  // element range of the flat buffer
    std::unique_ptr<Request> request;
    bool done = false;
  };
  void start(size_t upto);
  void complete(Bucket& b);  // b's reduction has finished (see release_reduced)
  struct Gather {
    int64_t begin, end;
    std::unique_ptr<Request> request;
  };

  Communicator& comm_;
  Tensor grads_;
  bool overlap_;
  std::vector<int64_t> shards_;  // shard bounds of the flat buffer (empty: not sharded)
  std::vector<Bucket> buckets_;  // in launch order: highest offsets first
  size_t next_ = 0;              // first bucket not yet started
  bool release_ = false;         // release_reduced() was called
  std::vector<Gather> gathers_;  // the parameter all-gathers of the last start_allgather, in forward order
  size_t gathered_ = 0;          // gathers_[0, gathered_) have been waited for
};

}  // namespace hpc::dist
