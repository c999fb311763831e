// Trainer: resume, checkpoints and early stops (the rest is trainer.cpp; the
// rules are CheckpointPolicy's, the messages protocol.h's).
//
// Collectives here are called by every rank in the same order: the stop vote
// after every step, the window gather and outcome broadcast of every save,
// the broadcasts of a resume. Only rank 0 touches files, so a shared
// filesystem sees one writer and one reader, and the other ranks get the
// state by one broadcast per flat buffer. Host scalars go over
// ctx_.host_comm(); model and optimizer buffers over comm_for(t): NCCL for
// GPU tensors, MPI for host ones.
#include <signal.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <utility>

#include "backend/ops.h"
#include "ckpt/store.h"
#include "ckpt/validate.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/host_pages.h"
#include "train/tp_state.h"
#include "train/trainer.h"

namespace hpc::train {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string format_bytes(double b) {
  char buf[32];
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  return buf;
}

}  // namespace

void Trainer::print_checkpoint_policy() {
  if (!ctx_.is_root()) return;
  std::printf("checkpoints: %s/ckpt-STEP.h5 %son SIGUSR1/SIGTERM (then exit 75) and at the end; %d kept\n",
              cfg_.run_dir.c_str(), policy_.periodic().c_str(), cfg_.ckpt.keep);
  const Deadline& deadline = policy_.deadline();
  if (deadline.active())
    std::printf(
        "deadline: %s, %s from now: stops with a checkpoint (exit 75) when the next step would not fit\n",
        deadline.source().c_str(), format_duration(deadline.seconds_left(Clock::now())).c_str());
  std::fflush(stdout);
}

void Trainer::load_resume_checkpoint() {
  resume_rss0_ = rss_bytes();  // what the resume costs each rank in host memory, measured
  reset_peak_rss();
  resume_t0_ = dist::monotonic_seconds();
  if (!ctx_.is_root() || cfg_.resume.empty()) return;
  std::vector<std::string> log;
  // Several ranks, each with its range of the flat state (ZeRO) or its parts of it (a split model): the
  // file is verified here chunk by chunk and read piece by piece later, so rank 0 never holds all of it.
  const bool streamed = sharding_->active() || grid_.tp() > 1 || stage_;
  resume_ = ckpt::locate_resume(cfg_.resume, cfg_.run_dir, log,
                                streamed ? ckpt::FlatData::Verify : ckpt::FlatData::Load);
  for (const std::string& line : log) std::fprintf(stderr, "hpctrain: warning: %s\n", line.c_str());
  if (!resume_) {
    std::printf("resume: no checkpoint in %s: starting at step 0\n", cfg_.run_dir.c_str());
    return;
  }
  ckpt::RunLayout run = ckpt::layout_of(whole_model(), *optimizer_, name_of(cfg_.optim.name));
  run.world_size = grid_.dp();  // the replicas: the global batch is theirs
  run.batch_size = cfg_.train.batch_size;
  run.accum_steps = cfg_.train.accum_steps;
  run.global_batch = global_batch_;
  run.train_samples = data_.train->info().size;
  run.steps_per_epoch = steps_per_epoch_;
  run.seed = cfg_.train.seed;
  run.allow_reshard = cfg_.ckpt.allow_reshard;
  for (const std::string& note : ckpt::check_resumable(resume_->checkpoint, resume_->path, run))
    std::printf("resume: note: %s\n", note.c_str());
  // Checked here, in the agreed phase, so that a bad state is one line on every rank.
  if (precision_->dynamic_scaling() && resume_->checkpoint.loss_scaling) {
    const ckpt::LossScaling& l = *resume_->checkpoint.loss_scaling;
    try {
      DynamicLossScale().restore({l.scale, l.good_steps, l.skipped_steps, l.consecutive_skips});
    } catch (const UserError& e) {
      throw UserError("checkpoint '" + resume_->path + "': " + e.what());
    }
  }
}

void Trainer::apply_resume_checkpoint() {
  ResumeHead head;
  if (resume_) {
    const ckpt::Checkpoint& c = resume_->checkpoint;
    ckpt::RunLayout run;
    run.global_batch = global_batch_;
    run.steps_per_epoch = steps_per_epoch_;
    head.found = 1;
    head.step = ckpt::resume_step(c, run);
    head.optimizer_steps = c.optimizer_steps;
    if (c.loss_scaling) {
      head.has_loss_scaling = 1;
      head.loss_scale = c.loss_scaling->scale;
      head.good_steps = c.loss_scaling->good_steps;
      head.skipped_steps = c.loss_scaling->skipped_steps;
      head.consecutive_skips = c.loss_scaling->consecutive_skips;
    }
    if (sharding_->active() || grid_.tp() > 1 || stage_)
      ckpt::restore_buffers(c, *model_);  // the sharded or split state goes to each rank below
    else
      ckpt::restore(c, precision_->optimizer_params(), *model_, *optimizer_);
  }
  dist::Communicator& host = ctx_.host_comm();
  broadcast(host, head, 0);
  if (!head.found) return;
  // The full-precision parameters (a 16-bit model's master weights), then the
  // model's own copy of them from those on every rank.
  if (grid_.tp() > 1 || stage_) {
    // A split model (or a pipeline stage's piece): every rank takes its parts of the unsplit tensors (and of
    // those its ZeRO shard).
    ckpt::FlatSource* file = resume_ ? resume_->flat.get() : nullptr;
    take_apart(file, 0, precision_->optimizer_params());
    for (auto& [name, t] : optimizer_->state())
      take_apart(file, resume_ ? ckpt::flat_dataset_of(resume_->checkpoint, name) : 0, t);
  } else if (sharding_->active()) {
    // ZeRO: rank 0 reads each rank's range of the file and sends it there, a chunk at a time; then the
    // parameters are all-gathered as after every step. The checkpoint may come from any dist.zero.
    ckpt::FlatSource* file = resume_ ? resume_->flat.get() : nullptr;
    sharding_->scatter_from_root(file, 0, precision_->optimizer_params(), host);
    for (auto& [name, t] : optimizer_->state())
      sharding_->scatter_from_root(file, resume_ ? ckpt::flat_dataset_of(resume_->checkpoint, name) : 0, t,
                                   host);
  } else {
    comm_for(precision_->optimizer_params()).broadcast(precision_->optimizer_params(), 0);
    for (auto& [name, t] : optimizer_->state()) comm_for(t).broadcast(t, 0);
  }
  for (auto& [name, t] : model_->buffers()) comm_for(t).broadcast(t, 0);
  precision_->publish();
  // ZeRO 1/2: the shards to every rank, as after every step (stage 3 gathers its units as forward runs).
  start_param_allgather();
  settle_params();
  // fp16's loss scale and its counters continue where they stopped (exact resume); a checkpoint
  // without them (another precision, or written before they were saved) starts the scale afresh.
  if (precision_->dynamic_scaling() && head.has_loss_scaling)
    precision_->scaler().restore(
        {head.loss_scale, head.good_steps, head.skipped_steps, head.consecutive_skips});

  // The open logging window, one per data-parallel replica (its tp group's ranks hold the same sums):
  // each replica its own when their number is unchanged (bit-exact step table), else all of them on
  // the first replica.
  const int replicas = grid_.dp();
  std::vector<LogWindowSums> rows(static_cast<size_t>(replicas));
  if (resume_) {
    const auto& saved = resume_->checkpoint.log_window;
    for (size_t r = 0; r < saved.size(); ++r) {
      LogWindowSums& row = rows[saved.size() == static_cast<size_t>(replicas) ? r : 0];
      row.loss_sum += saved[r].loss_sum, row.count += saved[r].count, row.correct += saved[r].correct;
      row.steps = std::max(row.steps, static_cast<int64_t>(saved[r].steps));
    }
  }
  broadcast_rows(host, rows, 0);
  window_ = rows[static_cast<size_t>(grid_.dp_rank())];

  step_ = head.step;
  optimizer_->set_steps_taken(head.optimizer_steps);
  policy_.resumed_at(step_);
  progress_ =
      std::make_unique<Progress>(cfg_.log.progress, total_steps_, step_, ctx_.is_root(), ctx_.world());
  if (resume_) {
    const ckpt::Checkpoint& c = resume_->checkpoint;
    std::printf("resumed from %s: step %" PRId64 " of %" PRId64 " (epoch %" PRId64 "), saved at step %" PRId64
                " on %" PRId64 " rank(s) by hpctrain %s\n",
                resume_->path.c_str(), step_, total_steps_, step_ / steps_per_epoch_, c.step, c.world_size,
                c.hpctrain_version.c_str());
    std::fflush(stdout);
    resume_.reset();
  }
  report_peak_memory(false, resume_rss0_, dist::monotonic_seconds() - resume_t0_);
}

Tensor Trainer::put_together(const Tensor& t) {
  Tensor local = ckpt::host_f32(t);
  if (sharding_->active()) {  // ZeRO: this rank's shard of the flat buffer; the others' from its replicas
    Tensor whole(Shape{model_->num_params()}, DType::F32);
    backend::copy(local.view(Shape{local.count()}), whole.slice(sharding_->lo(), Shape{sharding_->count()}));
    dp_comm_.allgather_shards(whole, sharding_->bounds());
    local = whole;
  }
  if (grid_.dp_rank() != 0) return Tensor();  // the first replica's tp group (or stages) put it together
  if (stage_) return gather_stages(local.view(Shape{local.count()}));
  return gather_unsplit(*model_, local.view(Shape{local.count()}), grid_.host(dist::GroupKind::Tp));
}

void Trainer::take_apart(ckpt::FlatSource* file, size_t k, const Tensor& mine) {
  HPC_ASSERT(!ctx_.is_root() || file != nullptr, "resume: rank 0 reads the checkpoint");
  // The unsplit tensors in the same order on every rank (the whole model's, which every stage knows):
  // rank 0 reads each and broadcasts it, each rank keeps its parts. No rank holds more of the unsplit
  // state than its largest tensor (gpt2-124m: the 154 MB embedding, of 1.5 GB).
  std::vector<const nn::ParamInfo*> unsplit;
  int64_t largest = 0;
  for (const nn::ParamInfo& p : whole_model().param_info()) {
    if (p.tied_copy) continue;  // its owner's tensor
    unsplit.push_back(&p);
    largest = std::max(largest, p.full_shape.count());
  }
  const Tensor buffer(Shape{largest}, DType::F32);
  // The parts go straight into `mine` when it is this rank's whole host float32 buffer.
  const bool direct = !sharding_->active() && mine.device() == Device::CPU && mine.dtype() == DType::F32;
  const Tensor local =
      direct ? mine.view(Shape{mine.count()}) : Tensor(Shape{model_->num_params()}, DType::F32);
  for (const nn::ParamInfo* p : unsplit) {
    const Tensor tensor = buffer.slice(0, p->full_shape);
    if (ctx_.is_root()) file->read(k, p->full_offset, tensor.view(Shape{tensor.count()}));
    ctx_.host_comm().broadcast(tensor, 0);
    take_parts_of(*model_, p->full_offset, tensor, local);
  }
  if (!direct)
    ckpt::assign(mine, sharding_->active() ? local.slice(sharding_->lo(), Shape{sharding_->count()}) : local,
                 "the parameters and optimizer state");
}

bool Trainer::checkpoint_or_stop() {
  const Clock::time_point now = Clock::now();
  policy_.step_ended(step_, now);
  fault_at(FaultPoint::StepEnd);  // test-only: a signal after this step, a slow step
  StopVote mine = policy_.vote(step_, signals_.received(), ctx_.rank(), now);
  if (ctx_.is_root() && writer_) {
    // Rank 0's background write, if it finished since the last boundary: its failure joins the vote.
    mine.write_failure = std::max(std::exchange(pending_write_failure_, 0), collect_write(false));
    mine.save_seconds = last_write_seconds_;
  }
  const StopDecision d = policy_.decide(sum_over_ranks(ctx_.host_comm(), mine), step_, ctx_.world(), now);
  switch (d.action) {
    case StopDecision::Action::StopDiskFull:  // rank 0 said so; the last checkpoint is intact
      exit_code_ = EXIT_IO;
      return true;
    case StopDecision::Action::Stop:
      stop(d.why);
      return true;
    case StopDecision::Action::Checkpoint:
      save_checkpoint(d.why);
      break;
    case StopDecision::Action::Continue:
      break;
  }
  policy_.resume_stepping(Clock::now());  // a save is not part of the next step's time
  return exit_code_ != EXIT_OK;           // a periodic save that hit a full disk stops the run (EXIT_IO)
}

void Trainer::stop(const std::string& why) {
  if (ctx_.is_root()) progress_->line("stop requested (" + why + ") after step " + std::to_string(step_));
  settle_writes();  // the write in flight completes first; then this step's own, if it has none
  const bool saved =
      exit_code_ != EXIT_IO && (step_ == policy_.last_saved_step() || save_checkpoint(why, /*wait=*/true));
  if (ctx_.is_root())
    progress_->line(
        saved ? "stopped after step " + std::to_string(step_) + " on all " + std::to_string(ctx_.world()) +
                    " rank(s), checkpoint written: exit 75 (requeue)"
              : "stopped after step " + std::to_string(step_) + " but the checkpoint could not be written");
  exit_code_ = saved ? EXIT_REQUEUE : exit_code_ == EXIT_IO ? EXIT_IO : EXIT_BAD_INPUT;
}

void Trainer::gather_checkpoint(ckpt::Checkpoint& c, ckpt::Snapshot how) {
  // Every rank's open logging window, and its step: they must all be equal here. The file keeps one
  // window per data-parallel replica (the ranks of a tp group hold the same sums).
  LogWindowSums mine = window_;
  mine.step = step_;
  const std::vector<LogWindowSums> windows = gather_from_ranks(ctx_.host_comm(), mine);
  // A split model: the unsplit model's state put together on rank 0, tensor by tensor.
  Tensor unsplit_params;
  std::vector<ckpt::NamedTensor> unsplit_state;
  if (grid_.tp() > 1 || stage_) {
    unsplit_params = put_together(precision_->optimizer_params());
    for (auto& [name, t] : optimizer_->state()) unsplit_state.push_back({name, put_together(t)});
  }

  if (!ctx_.is_root()) return;

  c.log_window.clear();
  for (size_t r = 0; r < windows.size(); ++r) {
    const LogWindowSums& w = windows[r];
    HPC_ASSERT(w.step == step_, "ranks are at different steps at a checkpoint");
    const dist::GridCoord at = grid_.shape().coord(static_cast<int>(r));
    if (at.tp == 0 && at.pp == grid_.pp() - 1)
      c.log_window.push_back({w.loss_sum, w.count, w.correct, static_cast<double>(w.steps)});
  }
  c.step = step_;
  c.epoch = step_ / steps_per_epoch_;
  c.step_in_epoch = step_ % steps_per_epoch_;
  c.consumed_samples = step_ * global_batch_;
  c.total_steps = total_steps_;
  c.world_size = grid_.dp();  // the replicas, whose batches make the global one
  c.batch_size = cfg_.train.batch_size;
  c.accum_steps = cfg_.train.accum_steps;
  c.global_batch = global_batch_;
  c.train_samples = data_.train->info().size;
  c.seed = cfg_.train.seed;
  c.sampler_epoch = c.epoch;
  c.sampler_batch = c.step_in_epoch;
  c.dropout_step = step_ * accum_;
  c.config_ini = to_ini(cfg_);
  c.hpctrain_version = std::string(hpctrain_version()) + " (" + hpctrain_commit() + ")";
  c.created_unix = static_cast<int64_t>(std::time(nullptr));
  // The host snapshot: deep copies of parameters, buffers and optimizer state (model_state.h), or
  // with several ranks everything but the flat state, which comes from the shards (save_checkpoint).
  if (grid_.tp() > 1 || stage_)
    ckpt::capture_unsplit(unsplit_params, whole_model(), std::move(unsplit_state), optimizer_->steps_taken(),
                          c);
  else if (channel_)
    ckpt::capture_layout(*model_, *optimizer_, c);
  else
    ckpt::capture(precision_->optimizer_params(), *model_, *optimizer_, c, how);
  if (precision_->dynamic_scaling()) {
    const DynamicLossScale::State l = precision_->scaler().state();
    c.loss_scaling = ckpt::LossScaling{l.scale, l.good_steps, l.skipped_steps, l.consecutive_skips};
  }
  c.optimizer = name_of(cfg_.optim.name);
}

bool Trainer::save_checkpoint(const std::string& why, bool wait) {
  settle_params();  // ZeRO: the parameters are whole before they are saved
  const Clock::time_point t0 = Clock::now();
  const size_t rss0 = rss_bytes();  // what a synchronous save costs each rank in host memory, measured
  reset_peak_rss();
  const Tracer::Range range(*tracer_, "checkpoint");  // NVTX: the snapshot (and a synchronous write)
  const bool background = writer_ && !wait;
  SaveOutcome out;
  // At most one write in flight on every rank (rank 0 writes, the others send their shards): the
  // previous one finishes (and rank 0 reports it) before this snapshot. Rank 0 says whether this
  // write starts at all (not after the disk was found full), so that no rank sends to nobody.
  if (ctx_.is_root()) {
    if (const int failed = collect_write(true)) out.saved = 0, out.exit_code = failed;
  } else if (writer_) {
    writer_->wait();
  }
  broadcast(ctx_.host_comm(), out, 0);
  ckpt::WriteJob job;
  if (background) job = writer_->take_spare();  // the last snapshot's memory, reused
  // A synchronous save writes the live state (nothing changes it until the write is done): no copy.
  const ckpt::Snapshot how = background ? ckpt::Snapshot::Copy : ckpt::Snapshot::Borrow;
  // Several ranks: each snapshots its own range of the flat state, and rank 0 writes the file from
  // every rank's pieces, a chunk at a time (ckpt/shard_stream.h): no rank holds more than its shard.
  if (channel_) {
    ckpt::capture_shard(precision_->optimizer_params(), *optimizer_, sharding_->bounds(), ctx_.rank(),
                        job.shard, how);
    job.channel = channel_;
    job.serve = !ctx_.is_root();
  }
  gather_checkpoint(job.checkpoint, how);
  job.step = step_;
  if (ctx_.is_root()) {
    job.path = ckpt::checkpoint_path(cfg_.run_dir, step_);
    job.dir = cfg_.run_dir;
    job.why = why;
    job.keep = cfg_.ckpt.keep;
  }
  if (!out.saved || (!ctx_.is_root() && !channel_)) {
    // The previous write found the disk full: this one is not started. Or nothing of this rank's is
    // written: a split model's state was put together on rank 0 above.
  } else if (background) {
    const double s0 = std::chrono::duration<double>(t0.time_since_epoch()).count();
    tracer_->span("checkpoint", "checkpoint snapshot, step " + std::to_string(step_), s0,
                  std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
    job.stall_s = seconds_between(t0, Clock::now());
    out.seconds = job.stall_s;
    writer_->start(std::move(job));
  } else {
    const ckpt::WriteResult r = ckpt::run_write_job(job);  // the other ranks send their shards meanwhile
    if (ctx_.is_root()) {
      out.exit_code = report_write(r, false);
      out.saved = r.ok ? 1 : 0;
      out.seconds = seconds_between(t0, Clock::now());
    }
  }
  broadcast(ctx_.host_comm(), out, 0);
  if (!background && out.saved) report_peak_memory(true, rss0, out.seconds);
  if (out.exit_code != 0) exit_code_ = static_cast<int>(out.exit_code);
  if (!out.saved) return false;
  policy_.saved(step_, Clock::now(), background ? 0.0 : out.seconds);
  return true;
}

void Trainer::report_peak_memory(bool save, size_t rss_before, double seconds) {
  const SaveMemory mine{static_cast<double>(std::max(peak_rss_bytes(), rss_before) - rss_before) / 1048576.0};
  const std::vector<SaveMemory> all = gather_from_ranks(ctx_.host_comm(), mine);
  if (!ctx_.is_root()) return;
  std::vector<double> extra(all.size());
  for (size_t r = 0; r < all.size(); ++r) extra[r] = all[r].peak_mb;
  double others = 0;
  for (size_t r = 1; r < extra.size(); ++r) others = std::max(others, extra[r]);
  char line[160];
  std::snprintf(line, sizeof line, "%s memory: peak +%.1f MiB on rank 0 (the %s)",
                save ? "checkpoint" : "resume", extra[0], save ? "writer" : "reader");
  std::string out = line;
  if (extra.size() > 1) {
    std::snprintf(line, sizeof line, ", at most +%.1f MiB on another rank", others);
    out += line;
  }
  progress_->line(out);
  const std::string k = save ? "save" : "resume";
  Record rec;
  rec.add_int("checkpoint_step", step_).add(k + "_s", seconds).add(k + "_peak_mb_rank0", extra[0]);
  if (extra.size() > 1) rec.add(k + "_peak_mb_others", others);
  metrics_.write(rec);
}

int Trainer::report_write(const ckpt::WriteResult& r, bool background) {
  tracer_->span_of(r.step, "checkpoint", "checkpoint write, step " + std::to_string(r.step), r.start_s,
                   r.start_s + r.seconds, background ? 2 : 0);
  if (r.ok) {
    last_write_seconds_ = r.seconds;
    for (const std::string& line : r.prune_lines) progress_->line("checkpoint: " + line);
    char took[64];
    if (background)
      std::snprintf(took, sizeof took, "%.2f s in the background, training stalled %.3f s", r.seconds,
                    r.stall_s);
    else
      std::snprintf(took, sizeof took, "%.2f s", r.seconds);
    progress_->line("checkpoint: " + r.path + " (step " + std::to_string(r.step) + ", " + r.why + ", " +
                    format_bytes(r.bytes) + ", " + took + ")");
    return 0;
  }
  last_failed_write_ = r.step;
  if (r.disk_full) {
    // Disk full or over quota: every later save would fail too, and training on would only
    // lose more work. Stop now, all ranks together, with the previous checkpoint intact.
    std::string prev = "no earlier checkpoint";
    for (const ckpt::StoredCheckpoint& k : ckpt::list_checkpoints(cfg_.run_dir))  // newest first
      if (k.step < r.step) {
        prev = "the last one, " + k.path + ", is intact";
        break;
      }
    std::fprintf(stderr, "hpctrain: error%s: %s; stopping after step %" PRId64 " (%s)\n",
                 ctx_.world() > 1 ? " on rank 0" : "", r.error.c_str(), step_, prev.c_str());
    return EXIT_IO;
  }
  std::fprintf(stderr, "hpctrain: warning: the checkpoint at step %" PRId64 " was not written: %s\n", r.step,
               r.error.c_str());
  return 0;
}

int Trainer::collect_write(bool block) {
  if (!writer_) return 0;
  if (!ctx_.is_root()) {  // another rank's write only sends its shard: rank 0 reports the outcome
    if (block)
      writer_->wait();
    else
      writer_->poll();
    return 0;
  }
  std::optional<ckpt::WriteResult> r = writer_->poll();
  if (!r && block && writer_->in_flight()) {
    const int64_t pending = writer_->in_flight_step();
    const Clock::time_point w0 = Clock::now();
    r = writer_->wait();
    char waited[96];
    std::snprintf(waited, sizeof waited, "checkpoint: waited %.2f s for the step-%" PRId64 " write in flight",
                  seconds_between(w0, Clock::now()), pending);
    progress_->line(waited);
  }
  return r ? report_write(*r, true) : 0;
}

void Trainer::settle_writes() {
  WriteSettlement w;
  if (ctx_.is_root() && writer_) {
    w.exit_code = std::max(std::exchange(pending_write_failure_, 0), collect_write(true));
    w.failed_step = last_failed_write_;
  } else if (writer_) {
    writer_->wait();  // its shard sent
  }
  if (!cfg_.ckpt.async) return;  // no writer anywhere: nothing to agree on (the same on every rank)
  broadcast(ctx_.host_comm(), w, 0);
  if (w.exit_code != 0) exit_code_ = static_cast<int>(w.exit_code);
  policy_.unsaved(w.failed_step);  // that snapshot never reached disk
}

}  // namespace hpc::train
