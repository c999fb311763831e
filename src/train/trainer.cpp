// Trainer (see trainer.h).
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "backend/device.h"
#include "config/config.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/host_pages.h"
#include "core/mem_ledger.h"
#include "train/evaluation.h"

namespace hpc::train {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

void Trainer::print_header() {
  const dist::RankInfo& ri = ctx_.info();
  char device[160];
  if (device_ == Device::CUDA) {
    const backend::DeviceInfo d = backend::cuda_device_info(ri.local_rank % backend::cuda_device_count());
    std::snprintf(device, sizeof device, "cuda:%d %s (%s, %.0f GiB)", d.index, d.name.c_str(),
                  d.pci_bus_id.c_str(), double(d.total_bytes) / double(1 << 30));
  } else {
    std::snprintf(device, sizeof device, "cpu (%d BLAS threads)", blas_threads_);
  }
  char mine[400];
  std::snprintf(mine, sizeof mine, "  rank %3d  host %-20s pid %-8d local rank %d/%d  node %d  device %s",
                ri.rank, ri.host.c_str(), ri.pid, ri.local_rank, ri.local_size, ri.node, device);
  if (stage_) {  // which stage this rank runs, its micro-batches in flight and their activations
    const size_t n = std::strlen(mine);
    std::snprintf(mine + n, sizeof mine - n, "  stage %d/%d (%s)", stage_->stage(), stage_->stages(),
                  stage_line().c_str());
  }
  std::vector<std::string> lines = ctx_.gather_lines(mine);
  if (!ctx_.is_root()) return;
  std::printf("%s\n", version_report().c_str());
  std::string comms = "none (1 rank)";
  if (ri.world > 1)
    comms = grad_comm_ == &comm_ ? comm_.name()
                                 : grad_comm_->name() + " (gradients), " + comm_.name() + " (host)";
  std::printf("ranks: %d on %d node(s), communicator %s\n", ri.world, ri.num_nodes, comms.c_str());
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  for (const std::string& l : grid_.lines()) std::printf("%s\n", l.c_str());
  std::printf("configuration:\n%s", to_ini(cfg_).c_str());
  std::printf("data: %s: %s", cfg_.data.path.c_str(), data_.train->describe().c_str());
  if (data_.val)
    std::printf(", %lld validation %s", static_cast<long long>(data_.val->info().size), task().sample_word());
  const data::SplitInfo& ti = data_.train->info();
  if (!ti.missing_classes.empty()) {  // e.g. labels 0–2, 4–10: class 3 never occurs, yet has an output
    std::string list;
    for (size_t i = 0; i < ti.missing_classes.size() && i < 20; ++i)
      list += (i ? ", " : "") + std::to_string(ti.missing_classes[i]);
    if (ti.missing_classes.size() > 20) list += ", …";
    std::printf(
        "\nwarning: /train/y has no sample of class%s %s of its %lld classes (num_classes = %s); "
        "training goes on",
        ti.missing_classes.size() > 1 ? "es" : "", list.c_str(), static_cast<long long>(ti.num_classes),
        ti.num_classes_source.c_str());
  }
  std::printf("\nloader: %d worker thread(s), %d batches ahead, %s host buffers, %s", cfg_.data.workers,
              cfg_.data.prefetch, train_loader_->allocator_name(),
              data_.train->mapped() ? "data memory-mapped" : "data read with H5Dread");
  if (!cfg_.data.augment.empty()) std::printf(", augment: %s", cfg_.data.augment.c_str());
  if (!loader_note_.empty()) std::printf("\n%s", loader_note_.c_str());
  const std::string advice = data::mmap_advice({data_.train.get(), data_.val.get()});
  if (!advice.empty()) std::printf("\n%s", advice.c_str());
  std::printf("\nmodel: %s\n%s", model_->spec().c_str(), model_->summary().c_str());
  const nn::ActivationBytes act = model_->activation_bytes(micro_batch_);
  std::printf("activations: %.1f MiB per rank at batch %lld", double(act.kept) / 1048576.0,
              static_cast<long long>(micro_batch_));
  if (act.without_recompute > act.with_recompute)
    std::printf(act.kept < act.without_recompute ? " (recompute saves %.1f MiB)"
                                                 : " (--model.recompute true would save %.1f MiB)",
                double(act.without_recompute - act.with_recompute) / 1048576.0);
  std::printf("\n");
  const std::string micro = cfg_.train.micro_batches > 1
                                ? " (" + std::to_string(cfg_.train.micro_batches) + " micro-batches of " +
                                      std::to_string(micro_batch_) + ")"
                                : "";
  const std::string shared = grid_.tp() * grid_.pp() > 1
                                 ? " (the " + std::to_string(grid_.tp() * grid_.pp()) +
                                       " ranks of a replica's " + (grid_.pp() > 1 ? "pipeline" : "tp group") +
                                       " share its batch)"
                                 : "";
  std::printf(
      "batch: %lld%s per data-parallel replica × dp %d × %lld accumulation = %lld global%s; %lld "
      "steps/epoch, "
      "%lld steps\n",
      static_cast<long long>(cfg_.train.batch_size), micro.c_str(), grid_.dp(),
      static_cast<long long>(cfg_.train.accum_steps), static_cast<long long>(global_batch_), shared.c_str(),
      static_cast<long long>(steps_per_epoch_), static_cast<long long>(total_steps_));
  if (stage_)
    for (const std::string& l : pipeline_lines()) std::printf("%s\n", l.c_str());
  if (grid_.tp() > 1) {
    const nn::VocabSplit v = model_->output_vocab();
    std::printf(
        "tensor parallel: tp %d%s: this rank holds %lld of the model's %lld parameters (%.1f%%)", grid_.tp(),
        cfg_.dist.sequence_parallel ? " with sequence parallelism" : "",
        static_cast<long long>(model_->num_params()), static_cast<long long>(model_->num_full_params()),
        100.0 * static_cast<double>(model_->num_params()) / static_cast<double>(model_->num_full_params()));
    if (v.vocab > 0)
      std::printf("; vocabulary %lld padded to %lld (%lld per rank; padded logits never win)",
                  static_cast<long long>(v.vocab), static_cast<long long>(v.padded),
                  static_cast<long long>(v.shard));
    std::printf("\n");
  }
  if (!lr_note_.empty()) std::printf("%s\n", lr_note_.c_str());
  if (!init_note_.empty()) std::printf("%s\n", init_note_.c_str());
  if (precision_->sixteen_bit())
    std::printf(
        "precision: %s activations, parameters and gradients; fp32 master weights and optimizer state%s\n",
        precision_->name(), precision_->loss_scale() != 1.0 ? "; dynamic loss scaling" : "");
  if (sum_over_replicas_)
    std::printf("SyncBatchNorm: on (batch statistics over all %d data-parallel replicas)\n", grid_.dp());
  if (!sharding_->note().empty()) std::printf("%s\n", sharding_->note().c_str());
  std::printf("memory per rank: parameters %.2f MiB, gradients %.2f MiB, optimizer state %.2f MiB%s",
              double(model_->params().num_bytes()) / 1048576.0, grad_buffer_bytes() / 1048576.0,
              optimizer_state_bytes() / 1048576.0,
              precision_->sixteen_bit() ? " (with fp32 master weights)" : "");
  if (sharded_ && !model_->stores_whole_params())
    std::printf(", gather buffers %.2f MiB, gradient staging %.2f MiB",
                static_cast<double>(sharded_->gather_buffer_bytes()) / 1048576.0,
                static_cast<double>(sharded_->grad_staging_bytes()) / 1048576.0);
  if (sharding_->active())
    std::printf("; ZeRO stage %d: this rank steps elements [%lld, %lld) of %lld", sharding_->stage(),
                static_cast<long long>(sharding_->lo()), static_cast<long long>(sharding_->hi()),
                static_cast<long long>(model_->num_params()));
  std::printf("\n");
  if (reducer_)
    std::printf("gradient %s: %d bucket(s) of ~%.3g MiB, %s, %s, dist.timeout %g s\n",
                sharding_->active() ? "reduce-scatter" : "all-reduce", reducer_->num_buckets(),
                cfg_.dist.bucket_mb,
                device_ == Device::CPU && cfg_.dist.reduce == ReduceAlgo::Native
                    ? "MPI library's reduction (dist.reduce native)"
                    : "rank-ordered",
                cfg_.dist.overlap && sharding_->stage() != 1 ? "overlapped with backward"
                                                             : "after backward (no overlap)",
                cfg_.dist.timeout);
  std::printf("%s%s", sharded_summary().c_str(), memory_model_table().c_str());
  std::fflush(stdout);
  print_checkpoint_policy();
}

void Trainer::start_train_loader() {
  // Item = one micro-batch: step s, micro-step m is item s·accum + m, and
  // takes rows [m·b, (m+1)·b) of the rank's part of global batch s.
  const int64_t accum = accum_;
  train_loader_->start(step_ * accum, total_steps_ * accum, [this, accum](int64_t item, int64_t* out) {
    const int64_t step = item / accum;
    return sampler_->indices(step / steps_per_epoch_, step % steps_per_epoch_, (item % accum) * micro_batch_,
                             micro_batch_, out);
  });
}

// llm.c's loop, with gradient accumulation: only the last micro-batch communicates (DDP's no_sync).
void Trainer::train_step(int64_t batch, StepTimes& times) {
  StepPhases phases(*tracer_, times, step_ + 1);
  begin_step(batch);
  if (stage_) {
    const double t0 = dist::monotonic_seconds(), waited = times.bubble;
    pipeline_micro_batches(phases);  // dist.pp > 1: this stage's part, in its schedule's order
    if (++pipe_steps_ > 0) {         // the first step warms up
      pipe_step_s_ += dist::monotonic_seconds() - t0;
      pipe_wait_s_ += times.bubble - waited;
    }
  } else {
    for (int64_t micro = 0; micro < accum_; ++micro) {
      const MicroBatch mb = next_micro_batch(micro, phases);
      forward_loss(*model_, mb.x, mb, dlogits_, phases);
      backward(*model_, dlogits_, /*reduce=*/micro + 1 == accum_, phases);
    }
  }
  // Stage 3: forward's parameter gathers and backward's reduce-scatters waited for inside those phases.
  phases.count_as_comm(sharded_waits_in_compute(times));
  wait_for_gradients(phases);
  update(phases);
  ++step_;
}

void Trainer::begin_step(int64_t batch) {
  tracer_->take_collectives(ctx_.heartbeat().flight());  // the previous step's, the stop vote included
  ctx_.on_step(step_ + 1);  // hang reports name the step; test-only fault injection
  if (train_loader_->position() != step_ * accum_ || train_loader_->end() != total_steps_ * accum_)
    start_train_loader();
  // Real samples of this global batch per rank: the global batch, except a drop_last = false tail.
  // The loss is averaged over the global batch: each replica's part of it (the tp group shares one).
  normalizer_ = static_cast<double>(sampler_->global_valid(batch)) / grid_.dp();
  sharding_->zero_grads(model_->grads());
  run_ = nn::RunCtx();
  run_.training = true;
  run_.seed = cfg_.train.seed;
  run_.sum_over_replicas = sum_over_replicas_;
  run_.rank = grid_.dp_rank();  // dropout: a mask per replica, the same on every rank of its tp group
  run_.tp = tp_device_.get();   // the split layers' collectives (null: not split)
  if (tracer_->on())
    run_.on_layer = [this](size_t i, bool backward, double t0, double t1) {
      const int layer = static_cast<int>(i);
      tracer_->span(backward ? "backward" : "forward",
                    std::string(backward ? "backward " : "forward ") + std::to_string(layer) + " " +
                        model_->layer_spec(layer),
                    t0, t1);
    };
}

Trainer::MicroBatch Trainer::next_micro_batch(int64_t micro, StepPhases& phases) {
  const data::Batch* b = nullptr;
  {
    const auto p = phases.enter(Phase::DataWait);  // the loader's threads gathered it ahead, or not
    b = &train_loader_->next();
  }
  const auto p = phases.enter(Phase::HostToDevice);
  const auto [x, y] = (*upload_)(*b);
  return {x, y, b->valid, static_cast<uint64_t>(step_ * accum_ + micro)};
}

void Trainer::forward_loss(nn::Model& model, const Tensor& x, const MicroBatch& mb, const Tensor& dlogits,
                           StepPhases& phases) {
  run_.step = mb.index;
  const Tensor* logits = nullptr;
  {
    const auto p = phases.enter(Phase::Forward);
    logits = &model.forward(x, run_, params_arrive(phases));
  }
  const auto p = phases.enter(Phase::Loss);
  // fp16: the loss gradient is scaled by S (MixedPrecision::unscale divides it out again).
  const nn::LossStats s =
      loss_->forward_backward(*logits, mb.y, mb.valid, normalizer_ / precision_->loss_scale(), dlogits);
  window_.loss_sum += s.loss_sum;
  window_.count += static_cast<double>(s.count);
  window_.correct += static_cast<double>(s.correct1);
}

void Trainer::backward(nn::Model& model, const Tensor& dout, bool reduce, StepPhases& phases, int64_t base,
                       bool begin) {
  const auto p = phases.enter(Phase::Backward);
  if (reducer_ && reduce) {
    if (begin) reducer_->begin();
    model.backward(dout, run_, [this, base](int64_t frontier) {
      fault_at(FaultPoint::Backward);  // test-only: a signal mid-backward, buckets in flight
      reducer_->on_ready(base + frontier);
    });
  } else {
    begin_sharded_backward(reduce);  // stage 3: each unit's gradients reduce-scattered as its backward ends
    fault_at(FaultPoint::Backward);
    model.backward(dout, run_);
  }
}

void Trainer::wait_for_gradients(StepPhases& phases) {
  const auto p = phases.enter(Phase::GradientWait);
  if (stage_) sum_tied_grads();  // before the data-parallel reduction (those stages do not overlap it)
  if (reducer_) reducer_->finish();
  finish_sharded_backward();
}

void Trainer::update(StepPhases& phases) {
  const auto p = phases.enter(Phase::Optimizer);
  if (!precision_->unscale())
    return;  // fp16 gradients overflowed: the step is skipped, the loss scale lowered
  // The norm over every rank's shard in a fixed order (train/sharding.h): the same bits for any
  // dist.zero; clipping scales this rank's gradients by the same factor as unsharded. A split model's
  // is the unsplit model's norm (train/tp_state.h), after sequence parallelism's partial gradients
  // are summed over the tp group.
  const Tensor& grads = precision_->optimizer_grads();
  if (grid_.tp() > 1)
    sum_partial_grads(*model_, grads, sharding_->lo(), grid_.comm(dist::GroupKind::Tp, grads.device()));
  if (stage_) {
    last_grad_norm_ = pipeline_grad_norm(grads);
  } else if (grid_.tp() > 1) {
    last_grad_norm_ = tp_grad_norm(*model_, grads, *sharding_, dp_comm_, grid_.host(dist::GroupKind::Tp));
  } else {
    last_grad_norm_ = sharding_->grad_norm(grads, dp_comm_);
  }
  optim::clip_to_norm(precision_->optimizer_grads(), last_grad_norm_, cfg_.optim.clip_norm);
  if (!std::isfinite(last_grad_norm_))
    throw UserError("training diverged: the gradient norm is not finite at step " +
                    std::to_string(step_ + 1) +
                    ": lower --optim.lr, add --optim.warmup_steps or set --optim.clip_norm");
  last_lr_ = schedule_->lr_at(step_);
  optimizer_->step(precision_->optimizer_params(), precision_->optimizer_grads(), last_lr_);
  precision_->publish();
  // Every rank's updated shard to every rank: started here, waited for by the next forward layer by
  // layer (or by settle_params, before anything else reads the parameters).
  start_param_allgather();
}

std::function<void(int64_t)> Trainer::params_arrive(StepPhases& phases) {
  if (!reducer_ || !reducer_->allgather_pending()) return {};  // stage 3 gathers inside forward itself
  return [this, &phases](int64_t end) {
    const double t0 = dist::monotonic_seconds();
    reducer_->params_ready(end);
    phases.count_as_comm(dist::monotonic_seconds() - t0);
  };
}

double Trainer::optimizer_state_bytes() const {
  double bytes = 0;
  for (const auto& [name, t] : optimizer_->state()) bytes += static_cast<double>(t.num_bytes());
  if (precision_->sixteen_bit()) bytes += static_cast<double>(precision_->optimizer_params().num_bytes());
  return bytes;
}

double Trainer::grad_buffer_bytes() const {
  // ZeRO 2 on the CPU: what is resident of the flat buffer (the own shard between steps).
  const Tensor& g = model_->grads();
  double bytes = static_cast<double>(
      sharding_->keeps_own_grads_only() ? resident_bytes(g.raw(), g.num_bytes()) : g.num_bytes());
  if (precision_->sixteen_bit()) bytes += static_cast<double>(precision_->optimizer_grads().num_bytes());
  return bytes;
}

std::string Trainer::tp_traffic_line(int64_t steps) const {
  const CommTp::Traffic& t = tp_device_->traffic();
  const double per = 1.0 / static_cast<double>(steps);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "tensor parallel: %.0f collectives of tp[%d ranks] per step, %.2f M elements per rank per "
                "step, %.1f ms per step in them (rank 0, evaluation included)",
                static_cast<double>(t.calls) * per, grid_.tp(), t.elements * per / 1e6,
                1e3 * t.seconds * per);
  return buf;
}

std::string Trainer::device_report() const {
  const backend::DeviceMemoryStats m = backend::device_memory_stats();
  char line[200];
  std::snprintf(line, sizeof line, "      device memory: peak %.1f MiB of %.1f GiB",
                double(m.peak) / 1048576.0, double(m.total) / double(1 << 30));
  std::string out = line;
  if (precision_->loss_scale() != 1.0 || precision_->skipped_steps() > 0) {
    std::snprintf(line, sizeof line, "; fp16 steps skipped: %lld, loss scale %g",
                  static_cast<long long>(precision_->skipped_steps()), precision_->loss_scale());
    out += line;
  }
  return out;
}

void Trainer::log_step(int64_t epoch, double window_s) {
  // Loss and accuracy over the window, summed over the replicas (one small allreduce; the ranks of a
  // tp group hold the same sums). A pipeline's loss is its last stage's: summed over the world, the
  // other stages adding nothing (the same bits as the replicas' sum).
  const bool holds_loss = !stage_ || (stage_->has_loss() && grid_.tp_rank() == 0);
  const LogWindowSums all = stage_ ? sum_over_ranks(comm_, holds_loss ? window_ : LogWindowSums())
                                   : sum_over_ranks(dp_comm_, window_);
  const StepTimes& t = window_times_;
  const double loss = all.loss_sum / std::max(1.0, all.count);
  const double steps = static_cast<double>(std::max<int64_t>(1, window_.steps));
  // The loss counts tokens for a language model: samples are windows of context() tokens.
  const double per_sample = task().items_per_sample();
  const double sps = all.count / per_sample / std::max(1e-9, window_s);
  progress_->step_line(epoch, step_, loss, last_lr_, last_grad_norm_, sps * per_sample, 1e3 * t.data / steps,
                       1e3 * t.compute / steps, 1e3 * t.comm / steps);
  Record r;
  r.add_int("step", step_)
      .add_int("epoch", epoch)
      .add("loss", loss)
      .add("lr", last_lr_)
      .add("grad_norm", last_grad_norm_)
      .add("samples_per_s", sps)
      .add("data_ms", 1e3 * t.data / steps)
      .add("compute_ms", 1e3 * t.compute / steps)
      .add("comm_ms", 1e3 * t.comm / steps)
      .add("train_acc", all.correct / std::max(1.0, all.count))
      .add("optimizer_state_mb", optimizer_state_bytes() / 1048576.0)
      .add("grad_buffer_mb", grad_buffer_bytes() / 1048576.0);
  if (task().language_model()) r.add("tokens_per_s", sps * per_sample);
  if (sharded_) r.add("gather_ms", 1e3 * t.gather / steps);
  if (stage_) r.add("bubble_ms", 1e3 * t.bubble / steps);  // rank 0's: the first stage's waits
  // What this rank's own allocations held at most (core/mem_ledger.h): the memory model, measured.
  for (auto [key, use] : {std::pair{"peak_params_mb", MemUse::Params},
                          {"peak_grads_mb", MemUse::Grads},
                          {"peak_optimizer_mb", MemUse::OptimizerState},
                          {"peak_gather_mb", MemUse::GatherBuffers},
                          {"peak_staging_mb", MemUse::GradStaging}})
    r.add(key, static_cast<double>(mem_use_stats(use).peak) / 1048576.0);
  if (precision_->sixteen_bit())
    r.add("loss_scale", precision_->loss_scale()).add_int("skipped_steps", precision_->skipped_steps());
  if (device_ == Device::CUDA) r.add("device_mem_peak_mb", backend::device_memory_stats().peak / 1048576.0);
  metrics_.write(r);
}

bool Trainer::params_pending() const {
  return (reducer_ && reducer_->allgather_pending()) || (sharded_ && sharded_->param_allgather_pending());
}

void Trainer::settle_params() {
  if (!params_pending()) return;
  const double t0 = dist::monotonic_seconds();
  if (reducer_) reducer_->finish_allgather();
  if (sharded_) sharded_->finish_param_allgather();
  tracer_->span("comm", "parameter all-gather", t0, dist::monotonic_seconds());
}

EvalResult Trainer::evaluate() {
  settle_params();
  if (!data_.val) return EvalResult();
  // The pass `hpctrain eval` runs too (evaluation.h): the same bits on any number of ranks.
  EvalInputs in;
  in.split = data_.val.get();
  in.model = model_.get();
  in.loss = loss_.get();
  in.upload = upload_.get();
  in.loader = val_loader_.get();
  in.comm = &dp_comm_;  // the replicas share the split's rows out; a tp group evaluates the same rows
  in.tp = tp_device_.get();
  in.rows = micro_batch_;
  in.seed = cfg_.train.seed;
  in.lockstep =
      sharded_ && !model_->stores_whole_params();  // ZeRO 3: forward gathers, on every rank together
  in.top5 = task().counts_top5(data_.val->info());
  if (stage_) {  // the batches go through the (virtual) stages one after the other (no pipelining)
    in.stages = &grid_.host(dist::GroupKind::Pp);
    in.stage_forward = [this](const Tensor& x, const nn::RunCtx& rc) -> const Tensor* {
      for (int c = 0; c < stage_->chunks(); ++c) {
        nn::Model& model = stage_->model_for(0, c);
        const Tensor& out = model.forward(stage_->first(c) ? x : stage_->receive_activation(0, c), rc);
        if (stage_->last(c)) return &out;
        stage_->send_activation(0, c);
      }
      return nullptr;
    };
  }
  const EvalResult r = evaluate_split(in);
  if (stage_) stage_->finish_sends();
  return r;
}

void Trainer::finish_trace() {
  if (!tracer_->enabled()) return;
  tracer_->take_collectives(ctx_.heartbeat().flight());
  // A background write of a traced step belongs in the file: the trace's end waits for it (rank 0).
  if (writer_ && writer_->in_flight() && tracer_->traces(writer_->in_flight_step()))
    pending_write_failure_ = collect_write(true);  // a full disk joins the next stop vote
  const std::string file = tracer_->finish(comm_, ctx_.info().host);
  if (!file.empty())
    progress_->line("trace: " + file + " (steps " + cfg_.log.trace_steps + ", " +
                    std::to_string(ctx_.world()) +
                    " rank(s); open in https://ui.perfetto.dev or chrome://tracing)");
}

EvalResult Trainer::run() {
  progress_->table_header(task().throughput_unit());
  if (tracer_->enabled()) {  // one time origin for every rank's timeline
    comm_.barrier();
    tracer_->start(dist::monotonic_seconds());
  }
  policy_.start(Clock::now());  // step and checkpoint timing start here, after set-up
  EvalResult last;
  auto window_start = Clock::now();
  const int64_t first_step = step_;
  while (step_ < total_steps_) {
    const int64_t epoch = step_ / steps_per_epoch_;
    train_step(step_ % steps_per_epoch_, window_times_);
    ++window_.steps;
    progress_->tick(step_);
    const bool epoch_end = step_ % steps_per_epoch_ == 0 || step_ == total_steps_;
    if (step_ % cfg_.log.every == 0 || epoch_end) {
      log_step(epoch, seconds_since(window_start));
      window_ = LogWindowSums();
      window_times_ = StepTimes();
      window_start = Clock::now();
    }
    if (epoch_end && data_.val) {
      const double e0 = dist::monotonic_seconds();
      const Tracer::Range range(*tracer_, "evaluation");
      last = evaluate();
      tracer_->span("eval", "evaluation", e0, dist::monotonic_seconds());
      progress_->line(task().eval_line(epoch, step_, last));
      if (device_ == Device::CUDA) progress_->line(device_report());
      metrics_.write(task().eval_record(epoch, step_, last));
      window_start = Clock::now();  // evaluation time is not training throughput
    }
    if (checkpoint_or_stop()) break;
    if (step_ >= tracer_->last_step()) finish_trace();
  }
  finish_trace();  // a run that stopped (or ended) inside the traced steps
  if (tp_device_ && step_ > first_step) progress_->line(tp_traffic_line(step_ - first_step));
  if (stage_) report_bubbles();
  settle_params();
  if (exit_code_ == EXIT_OK) {
    // Resumed from a finished run: nothing to train, but the final evaluation is still the answer.
    if (data_.val && last.count == 0) last = evaluate();
    settle_writes();  // a background write still in flight ends first (and may have found the disk full)
    if (exit_code_ == EXIT_OK && step_ != policy_.last_saved_step() &&
        !save_checkpoint("end of training", true) && exit_code_ == EXIT_OK)
      exit_code_ = EXIT_BAD_INPUT;  // (a full disk has set EXIT_IO)
  }
  progress_->done();
  return last;
}

}  // namespace hpc::train
