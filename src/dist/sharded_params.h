// ShardedParams: ZeRO stage 3 (dist.zero = 3), and stage 2's gradients on a
// GPU — the model stores only its shard, and units are gathered and reduced
// around the layers that need them (FSDP; DeepSpeed ZeRO-3).
//
// Rank r stores elements [bounds[r], bounds[r+1]) of the flat parameters
// and gradients (nn::StoredRange; the optimizer and a 16-bit model's master
// weights cover the same range, train/sharding.h). This object is the
// model's ParamSource: around every layer it runs the operations the
// UnitPlan fixed (dist/unit_plan.h) —
//   * before a unit's forward, its parameters are all-gathered into its
//     buffer (the own shard copied in, every other rank's received), and
//     the next unit's gather is issued at once, so it moves while this unit
//     computes: on MPI the gather is queued with the buckets and advanced by
//     MpiComm's progress thread; on NCCL it runs on the communicator's own
//     stream, the compute stream waiting for it only where a layer needs it;
//   * after the forward the buffer is free again, unless the unit is kept
//     for its backward (small units, the last one);
//   * before a unit's backward it is gathered again (prefetched one unit
//     ahead), its gradient staging buffer cleared; backward adds into it;
//   * when the last layer that writes a unit's gradients is done, they are
//     reduce-scattered (rank-ordered on MPI: the shard gets bitwise what
//     today's allreduce gives it) and, one unit later, the own part is copied
//     into the model's gradient shard.
// A unit's parameters hold exactly the values the unsharded buffer holds, at
// the same alignment, and every gradient element goes through the same
// additions in the same order, so on the CPU training is bitwise that of
// dist.zero = 0 for any world size. A recomputing block (model.recompute)
// runs its forward again inside its backward, so one gather serves both.
//
// Gradient accumulation (whole_grads): the unsharded run adds every
// micro-step's gradients into one buffer before it reduces them, and the bits
// of the result depend on that (a GEMM accumulates into what is there). To
// keep them, the micro-steps before the last add into a whole-size local
// gradient buffer, as PyTorch FSDP's no_sync does, and the last reduce-
// scatters it unit by unit; on the CPU the buffer's pages go back to the OS
// after each step. So accumulation costs the whole gradients' memory during
// the step, and the memory model says so.
//
// grads_only (stage 2 on a GPU, whose gradient buffer cannot hand pages back):
// the parameters stay whole and are all-gathered after the optimizer
// (start_param_allgather; the next forward waits unit by unit); only the
// gradients are staged per unit and reduce-scattered, so a rank holds its
// gradient shard plus the staging buffers instead of the whole buffer.
//
// Every buffer is allocated once, here; a step allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "dist/unit_plan.h"
#include "nn/model.h"

namespace hpc::dist {

class ShardedParams final : public nn::ParamSource {
 public:
  struct Options {
    UnitPlan::Options plan;
    bool whole_grads = false;  // gradient accumulation: a whole-size local gradient buffer (see above)
    bool grads_only = false;   // parameters whole; gradients staged (stage 2 on a GPU)
  };
  // model stores the shard [bounds[rank], bounds[rank + 1]) of its gradients, and of its parameters
  // unless grads_only; comm reaches the model's device. Builds the plan (UserError for a unit size that
  // cannot hold a layer), allocates every buffer, binds every layer once and installs itself as the
  // model's ParamSource.
  ShardedParams(Communicator& comm, nn::Model& model, std::vector<int64_t> bounds, const Options& options);
  ~ShardedParams() override;
  ShardedParams(const ShardedParams&) = delete;
  ShardedParams& operator=(const ShardedParams&) = delete;

  void before_forward(size_t layer, const nn::RunCtx& ctx) override;
  void after_forward(size_t layer, const nn::RunCtx& ctx) override;
  void before_backward(size_t layer) override;
  void after_backward(size_t layer) override;

  // Before each micro-step's backward; reduce: the last micro-step of the optimizer step.
  void begin_backward(bool reduce);
  // After the last micro-step's backward: settles what is still being reduced (the shard's gradients
  // are then final) and clears the accumulation buffer for the next step. Returns the seconds it
  // waited: the reduction backward did not hide.
  double finish();
  // Seconds spent waiting inside forward and backward since the last call: for parameter gathers,
  // and for earlier units' reduce-scatters (settled as the next starts).
  struct Waits {
    double gather = 0, reduce = 0;
  };
  Waits take_waits();

  // grads_only: the updated shard to every rank, unit by unit in forward order; the next forward
  // waits for each unit before its first layer (finish_param_allgather: for all).
  void start_param_allgather();
  void finish_param_allgather();
  bool param_allgather_pending() const;

  const UnitPlan& plan() const { return plan_; }
  int64_t gather_buffer_bytes() const;
  int64_t grad_staging_bytes() const;

 private:
  void run(const std::vector<UnitOp>& ops);
  void gather(int u);
  void wait_params(int u);
  void open_grads(int u);
  void reduce_grads(int u);
  void settle_grads(int u);
  Tensor param_view(int u) const;  // the unit's parameters in its buffer
  Tensor grad_view(int u) const;   // its gradients in its staging buffer (or the whole buffer)
  int64_t lo() const { return bounds_[static_cast<size_t>(comm_.rank())]; }
  int64_t hi() const { return bounds_[static_cast<size_t>(comm_.rank()) + 1]; }

  Communicator& comm_;
  nn::Model& model_;
  std::vector<int64_t> bounds_;
  Options options_;
  UnitPlan plan_;
  std::vector<Tensor> param_buffers_, grad_buffers_;
  Tensor whole_grads_;                             // whole_grads: the local accumulation buffer
  std::vector<std::unique_ptr<Request>> gathers_;  // per unit: its gather in flight
  std::vector<std::unique_ptr<Request>> reduces_;  // per unit: its reduce-scatter in flight
  std::vector<int> occupant_;                      // per gather buffer: the unit resident in it, or -1
  bool reduce_ = true;                             // this backward reduce-scatters (the last micro-step)
  double gather_wait_ = 0, reduce_wait_ = 0;
};

}  // namespace hpc::dist
