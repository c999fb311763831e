// Trainer: where a model that stores only its shard comes from (ZeRO stage
// 3, and stage 2's gradients on a GPU), and the step's hooks into
// dist::ShardedParams (dist/sharded_params.h explains the scheme).
//
// The model is built storing the shard (nn::StoredRange) from the start, so
// no rank ever allocates the whole parameter or gradient buffer; each rank
// draws its own shard's initial values from the seed (the same numbers rank
// 0 would broadcast). Everything else — the optimizer on the shard, the
// shard-wise gradient norm, checkpoints gathered shard by shard — is the
// train/sharding.h code every stage shares.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "config/options.h"
#include "dist/shards.h"
#include "train/memory_model.h"
#include "train/trainer.h"

namespace hpc::train {

namespace {

// dist.zero 3 on several ranks: parameters and gradients sharded. Stage 2 on a GPU: the gradients only
// (its flat gradient buffer cannot give pages back as the CPU's does).
bool shards_model(const Config& cfg, int world, Device device) {
  return world > 1 && (cfg.dist.zero == 3 || (cfg.dist.zero == 2 && device == Device::CUDA));
}

std::string format_mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  return buf;
}

int64_t mib_to_elems(double mib, DType dtype) {
  return static_cast<int64_t>(std::floor(mib * 1048576.0 / static_cast<double>(dtype_size(dtype))));
}

}  // namespace

nn::StoredRange Trainer::stored_range() const {
  nn::StoredRange r;
  if (!shards_model(cfg_, ctx_.world(), device_)) return r;
  const int rank = ctx_.rank(), world = ctx_.world();
  r.range = [rank, world](int64_t n) {
    const std::vector<int64_t> b = dist::shard_bounds(n, world);
    return std::pair{b[static_cast<size_t>(rank)], b[static_cast<size_t>(rank) + 1]};
  };
  r.grads_only = cfg_.dist.zero == 2;
  return r;
}

void Trainer::build_sharded_params() {
  const DType dtype = model_->dtype();
  dist::ShardedParams::Options o;
  o.grads_only = cfg_.dist.zero == 2;
  // Stage 2 stages its gradients in units of about a bucket; stage 3 gathers units of zero_unit_mb.
  o.plan.unit_elems = mib_to_elems(o.grads_only ? cfg_.dist.bucket_mb : cfg_.dist.zero_unit_mb, dtype);
  o.plan.keep_elems = mib_to_elems(cfg_.dist.zero_keep_mb, dtype);
  o.plan.align = std::max<int64_t>(1, 64 / static_cast<int64_t>(dtype_size(dtype)));
  o.plan.prefetch = cfg_.dist.zero_prefetch;
  o.plan.oversize_alone = o.grads_only;
  o.plan.unit_option = o.grads_only
                           ? "option --dist.bucket_mb " + config::format_float(cfg_.dist.bucket_mb)
                           : "option --dist.zero_unit_mb " + config::format_float(cfg_.dist.zero_unit_mb);
  o.plan.bytes_per_elem = static_cast<double>(dtype_size(dtype));
  o.whole_grads = accum_ > 1;
  sharded_ = std::make_unique<dist::ShardedParams>(*grad_comm_, *model_, sharding_->bounds(), o);
}

std::string Trainer::sharded_summary() const {
  if (!sharded_) return "";
  const dist::UnitPlan& plan = sharded_->plan();
  const auto mib = [](int64_t bytes) { return format_mib(static_cast<double>(bytes)); };
  const std::string staging = std::to_string(plan.grad_buffers().size()) + " staging buffer(s) of " +
                              mib(sharded_->grad_staging_bytes()) + " in all";
  if (cfg_.dist.zero == 2)
    return "ZeRO stage 2 on the GPU: gradients in " + std::to_string(plan.units().size()) + " unit(s) of ~" +
           config::format_float(cfg_.dist.bucket_mb) + " MiB, " + staging +
           ", reduce-scattered as each unit's backward ends; parameters all-gathered after the optimizer\n";
  return "ZeRO stage 3: " + std::to_string(plan.units().size()) + " unit(s) of parameters (" +
         (cfg_.dist.zero_unit_mb > 0 ? "up to " + config::format_float(cfg_.dist.zero_unit_mb) + " MiB each"
                                     : std::string("a unit per layer")) +
         ") gathered into " + std::to_string(plan.param_buffers().size()) + " fixed buffer(s) of " +
         mib(sharded_->gather_buffer_bytes()) + " in all, " +
         (cfg_.dist.zero_prefetch ? "the next unit prefetched" : "no prefetch") +
         ", units of <= " + config::format_float(cfg_.dist.zero_keep_mb) +
         " MiB kept for backward; gradients " +
         (accum_ > 1 ? "accumulated whole over the micro-steps" : "in " + staging) +
         ", reduce-scattered as each unit's backward ends\n";
}

std::string Trainer::memory_model_table() const {
  MemoryInputs in;
  in.model = model_.get();
  in.param_bytes = static_cast<double>(dtype_size(model_->dtype()));
  in.world = ctx_.world();
  in.batch = micro_batch_;
  in.device = device_;
  in.state_tensors = static_cast<int>(optimizer_->state().size());
  in.sixteen_bit = precision_->sixteen_bit();
  in.dist = cfg_.dist;
  in.accum_steps = accum_;
  return memory_table(memory_model(in), ctx_.world(), ctx_.world() > 1 ? cfg_.dist.zero : 0);
}

void Trainer::begin_sharded_backward(bool last) {
  if (sharded_) sharded_->begin_backward(last);
}

double Trainer::sharded_waits_in_compute(StepTimes& t) {
  if (!sharded_) return 0;
  const dist::ShardedParams::Waits w = sharded_->take_waits();
  t.gather += w.gather;
  return w.gather + w.reduce;
}

void Trainer::finish_sharded_backward() {
  if (sharded_) sharded_->finish();
}

void Trainer::start_param_allgather() {
  if (reducer_ && sharding_->active()) reducer_->start_allgather(model_->params());
  if (sharded_ && !model_->stores_whole_grads() && model_->stores_whole_params())
    sharded_->start_param_allgather();
}

}  // namespace hpc::train
