// Trainer: one training run from a resolved Config, top to bottom.
//
// Set-up (setup.cpp) is a list of named steps, in the order their inputs
// need: choose the device, open the data (which decides the Task), build the
// model, make the replicas equal, build the optimizer and the gradient
// reducer, start the loaders, open the run directory.
//
// One optimizer step (train_step, trainer.cpp) is llm.c's loop with
// gradient accumulation: for each of accum_steps micro-batches, the next
// batch, forward and loss, backward (the last micro-batch hands gradient
// buckets to the GradReducer as backward completes them); then the wait for
// the gradients, and the update (mixed precision's unscale or skip, clip,
// learning rate, fused optimizer step). Each piece is a member function of
// its own, so that a schedule can drive them (a pipeline interleaves
// forward_loss and backward of several micro-batches); StepPhases times them
// for the step table and the trace. Rank 0 prints the step table and writes
// metrics.jsonl; an evaluation closes every epoch when a validation split exists.
//
// Checkpoints and early stops (trainer_checkpoint.cpp): after every step,
// the ranks vote (one tiny allreduce of a StopVote, protocol.h) and apply
// the same CheckpointPolicy (checkpoint_policy.h): stop on a signal or the
// deadline, checkpoint every ckpt.every_steps / ckpt.every_minutes. Rank 0
// writes RUN_DIR/ckpt-STEP.h5 from the state gather_checkpoint() collects
// (also on a stop and at the end). A stop returns from run() early, and
// exit_code() says 75: requeue me.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/async_writer.h"
#include "ckpt/model_state.h"
#include "config/config.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "dist/context.h"
#include "dist/grad_reducer.h"
#include "dist/grid.h"
#include "dist/sharded_params.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/batch_upload.h"
#include "train/checkpoint_policy.h"
#include "train/metrics.h"
#include "train/mixed_precision.h"
#include "train/pipeline_schedule.h"
#include "train/pipeline_stage.h"
#include "train/progress.h"
#include "train/protocol.h"
#include "train/sharding.h"
#include "train/signals.h"
#include "train/stage_partition.h"
#include "train/step_phases.h"
#include "train/task.h"
#include "train/tp_state.h"
#include "train/trace.h"

namespace hpc::train {

class Trainer {
 public:
  // The set-up steps (setup.cpp). Throws UserError on bad input. grid: the run's parallel grid
  // (dist.tp, dist.pp; the rest data parallel), whose groups the trainer's collectives use.
  Trainer(const Config& cfg, dist::Context& ctx, dist::Grid& grid);
  ~Trainer();

  // Versions, ranks, configuration, model summary (rank 0 prints; every rank must call).
  void print_header();
  // Trains to the configured total; returns the final evaluation (count 0 without validation data).
  EvalResult run();
  EvalResult evaluate();

  // Resume, in two phases around Context::agree_on_failure (main.cpp): rank 0
  // finds and reads the checkpoint that --resume names and checks that it
  // fits this run (UserError otherwise; other ranks do nothing), then every
  // rank takes rank 0's restored state.
  void load_resume_checkpoint();
  void apply_resume_checkpoint();
  // The process exit code after run(): EXIT_OK; EXIT_REQUEUE (75) when a
  // signal or the deadline stopped the run early and its checkpoint is
  // written; EXIT_BAD_INPUT (2) when a checkpoint that had to be written (on
  // a stop, at the end) could not be (rank 0 printed why); EXIT_IO (74) when
  // any checkpoint write found the disk full: every rank stops after that step.
  int exit_code() const { return exit_code_; }
  const Task& task() const { return data_.task; }

 private:
  // ---- set-up steps (setup.cpp), in the constructor's order ----
  void choose_device();                // device_, grad_comm_, BLAS threads
  void open_data();                    // data_ (the task and its splits), sampler_, step counts
  void build_model();                  // model_, checked against the data; loss_
  void check_tensor_parallel() const;  // dist.tp > 1: the options it cannot be combined with (yet)

  // ---- pipeline parallelism, dist.pp > 1 (trainer_pipeline.cpp) ----
  // From build_model: the whole model's layout, the partition, this stage's piece (model_), its
  // schedule and its models in flight, the tied pairs.
  void build_pipeline(const std::vector<nn::LayerArgs>& layers, DType dtype);
  void check_pipeline() const;  // the options and models it cannot be combined with (yet)
  // A step's micro-batches through this stage, in the schedule's order.
  void pipeline_micro_batches(StepPhases& phases);
  // The tied parameters' two gradients (first and last stage) summed over the embed group.
  void sum_tied_grads();
  // The whole model's gradient norm: every stage's squares (its tied copies left out), summed.
  double pipeline_grad_norm(const Tensor& grads);
  // Rank 0: the whole model's flat tensor from every stage's `local` (whole, host float32); the
  // other ranks of the first replica send theirs; returns undefined elsewhere.
  Tensor gather_stages(const Tensor& local);
  // The start-up lines of the pipeline: stages, schedule, micro-batches in flight, messages.
  std::vector<std::string> pipeline_lines() const;
  // This rank's part of its start-up line: its layers, micro-batches in flight and their activations.
  std::string stage_line() const;
  // The 1F1B bubble in theory, (P − 1)/(V·M + P − 1) of a step (Megatron-LM's interleaving divides it by V).
  double bubble_in_theory() const;
  // Every rank, at the end of a run: rank 0 prints each stage's waits on its neighbours (the bubble).
  void report_bubbles();
  // The whole model's layout: model_ itself unless it is a pipeline stage's piece.
  nn::Model& whole_model() { return whole_ ? *whole_ : *model_; }
  void sync_replicas();    // rank 0's parameters and buffers everywhere, the same model on every rank
  void build_optimizer();  // precision_ (master weights), optimizer_, schedule_
  void build_reducer();    // reducer_: gradient buckets cut at parameter boundaries (or sharded_)
  void start_loaders();    // upload_, loaders, dlogits_
  void open_run_dir();     // config.ini, metrics.jsonl, progress, the deadline's first estimate

  // ZeRO stage 3 (and 2 on a GPU): the model stores its shard (trainer_sharded.cpp).
  nn::StoredRange stored_range() const;
  void build_sharded_params();
  std::string sharded_summary() const;     // the start-up line of stage 3 (or 2 on a GPU)
  std::string memory_model_table() const;  // train/memory_model.h for this run
  void begin_sharded_backward(bool last);  // before each micro-step's backward
  // Stage 3's gather and reduce waits inside forward and backward (seconds; the gathers also into
  // times.gather), taken since the last call.
  double sharded_waits_in_compute(StepTimes& times);
  void finish_sharded_backward();  // after the last backward: its reductions complete
  // After the optimizer: every rank's updated shard to every rank (waited for by the next forward).
  void start_param_allgather();

  // ---- one training step (trainer.cpp), in its order ----
  // A micro-batch on the device: inputs, targets, its real rows (the rest is padding), and its
  // index among all micro-batches (dropout's masks are a function of it).
  struct MicroBatch {
    Tensor x, y;
    int64_t valid = 0;
    uint64_t index = 0;
  };
  // One optimizer step over global batch `batch` of the current epoch; adds to the logging window.
  void train_step(int64_t batch, StepTimes& times);
  void begin_step(int64_t batch);  // names the step, places the loader, zeroes the gradients
  MicroBatch next_micro_batch(int64_t micro, StepPhases& phases);
  // The loss and its gradient (dlogits_) of micro-batch mb, forward through `model` from `x`.
  // (dlogits: where the loss gradient goes.)
  void forward_loss(nn::Model& model, const Tensor& x, const MicroBatch& mb, const Tensor& dlogits,
                    StepPhases& phases);
  // reduce: hand buckets to the reducer (begin: the first such backward of the step; base: where
  // model's gradients start in the reducer's buffer). dout: the gradient of model's output.
  void backward(nn::Model& model, const Tensor& dout, bool reduce, StepPhases& phases, int64_t base = 0,
                bool begin = true);
  void wait_for_gradients(StepPhases& phases);
  void update(StepPhases& phases);
  // ZeRO: forward's hook that waits for the parameters below a layer's end (none when not pending).
  std::function<void(int64_t)> params_arrive(StepPhases& phases);
  // ZeRO: the last step's parameter all-gathers are still in flight (the next forward waits for
  // them layer by layer); settle_params() completes them, before anything else reads parameters.
  bool params_pending() const;
  void settle_params();
  // (Re)starts the training loader at step_ (first step, or after a resume moved step_).
  void start_train_loader();
  void log_step(int64_t epoch, double window_s);
  // This rank's bytes of optimizer state (incl. master weights) and of gradient buffers.
  double optimizer_state_bytes() const;
  double grad_buffer_bytes() const;
  // "device memory: peak … of …" (and fp16's skipped steps and loss scale), for GPU runs.
  std::string device_report() const;
  // "tensor parallel: …": the split layers' collectives per step over the last `steps` steps.
  std::string tp_traffic_line(int64_t steps) const;
  // At a step boundary, on every rank: agree on stopping, checkpoint when due.
  // Returns true when the run must stop now.
  bool checkpoint_or_stop();
  // Every rank: the training state as one portable checkpoint, filled in on rank 0. The one place
  // where state is gathered: every rank's logging window, each rank's range of the flat state
  // (streamed to rank 0's writer, ckpt/shard_stream.h); more parallelism gathers its pieces here,
  // so that the file always holds whole tensors in one layout and any run can resume from it.
  // `how`: host copies for a background write, views of the live state for a synchronous one
  // (ckpt/model_state.h).
  void gather_checkpoint(ckpt::Checkpoint& c, ckpt::Snapshot how);
  // A split model (tensor parallelism, pipeline stages; train/tp_state.h), every rank: t's unsplit
  // flat tensor (host float32) on rank 0, undefined elsewhere; and `mine` (this rank's parts, its
  // ZeRO shard of them) from flat dataset k of the checkpoint rank 0 reads (`file`), one unsplit
  // parameter tensor at a time.
  Tensor put_together(const Tensor& t);
  void take_apart(ckpt::FlatSource* file, size_t k, const Tensor& mine);
  // Every rank takes part; rank 0 writes. Returns false, on every rank, when
  // the write failed (rank 0 says why).
  // With ckpt.async (and wait false) rank 0 only takes the snapshot here and
  // the write runs in the background; its outcome is reported at a later
  // step boundary (collect_write). wait: write now (stops, end of training).
  bool save_checkpoint(const std::string& why, bool wait = false);
  // A stop the ranks agreed on: the checkpoint (unless this step has one), the lines, the exit code.
  void stop(const std::string& why);
  // Rank 0: reports the background write if it finished (or, block, once it
  // has); returns EXIT_IO when it found the disk full, else 0.
  int collect_write(bool block);
  // Every rank: waits for the write in flight and agrees on its outcome (a
  // full disk sets exit_code_; a failed write of the last saved step unsaves it).
  void settle_writes();
  // Rank 0: the log line (or error) of a finished write; EXIT_IO on a full disk.
  int report_write(const ckpt::WriteResult& r, bool background);
  // Every rank, after a synchronous save (or a resume, save false): the peak host memory it added
  // (VmHWM over rss_before); rank 0 logs its own (the file's writer or reader) and the largest other
  // rank's, and a metrics record (save_s, save_peak_mb_rank0, …_others; resume_… for a resume).
  void report_peak_memory(bool save, size_t rss_before, double seconds);
  void print_checkpoint_policy();
  // Every rank, once the traced steps are done (or the run ends): rank 0 writes log.trace.
  void finish_trace();

  // The data-parallel group's communicator that reaches t: the device one (NCCL) for GPU tensors.
  dist::Communicator& comm_for(const Tensor& t) { return grid_.comm(dist::GroupKind::Dp, t.device()); }

  const Config& cfg_;
  dist::Context& ctx_;
  dist::Grid& grid_;
  // Which group each collective spans is a choice made on purpose (dist/grid.h):
  dist::Communicator& comm_;     // the world, host buffers (MPI): the stop vote, checkpoint coordination
  dist::Communicator& dp_comm_;  // the data-parallel group, host buffers: loss and metric sums, ZeRO's
                                 // host moves and norm parts, evaluation
  dist::Communicator* grad_comm_ = nullptr;    // the data-parallel group on the device: gradients, parameter
                                               // broadcasts, SyncBN statistics (NCCL on GPUs)
  Device device_ = Device::CPU;                // train.device, resolved
  std::unique_ptr<Sharding> sharding_;         // dist.zero: this rank's shard of the flat buffers
  std::unique_ptr<MixedPrecision> precision_;  // train.precision: master weights, loss scale
  std::unique_ptr<BatchUpload> upload_;        // batches onto the device, in the model's input dtype
  RunData data_;                               // the task, the training and the validation split
  std::unique_ptr<data::DistributedSampler> sampler_;
  std::unique_ptr<nn::Model> model_;  // with dist.pp > 1 this stage's piece of the model
  // dist.pp > 1: the whole model's layout (no parameters stored), the cut, the stage's schedule and
  // its models in flight; pp rank 0 also every stage's piece (layout only) to put checkpoints
  // together; this stage's halves of the tied pairs (layout offset, count), in the pairs' order.
  std::unique_ptr<nn::Model> whole_;
  std::vector<std::unique_ptr<nn::Model>> piece_layouts_;
  StagePartition partition_;
  std::vector<PipeAction> plan_;
  std::unique_ptr<PipelineStage> stage_;
  std::vector<std::pair<int64_t, int64_t>> tied_;
  // The last virtual stage: the loss gradient of each micro-batch in flight through it.
  std::vector<Tensor> loss_grads_;
  std::vector<Tensor> targets_;  // interleaved: each micro-batch's targets, from its load to its loss
  const Tensor& loss_grad(int micro) const {
    return loss_grads_[static_cast<size_t>(micro) % loss_grads_.size()];
  }
  // The steps after the first: their seconds and the seconds this stage waited on its neighbours.
  double pipe_step_s_ = 0, pipe_wait_s_ = 0;
  int64_t pipe_steps_ = -1;
  std::unique_ptr<nn::Loss> loss_;
  // dist.tp > 1: the tensor-parallel group for the split layers (on the activations' device) and
  // for host scalars.
  std::unique_ptr<CommTp> tp_device_, tp_host_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<dist::GradReducer> reducer_;
  std::unique_ptr<dist::ShardedParams> sharded_;  // instead of reducer_ when the model stores a shard
  MetricsLog metrics_;
  std::unique_ptr<Progress> progress_;
  std::string lr_note_;
  std::string init_note_;  // model.init's summary

  int64_t micro_batch_ = 0;   // per rank, per micro-step: train.batch_size / train.micro_batches
  int64_t accum_ = 1;         // micro-steps per optimizer step: train.accum_steps × train.micro_batches
  int64_t global_batch_ = 0;  // per optimizer step, all ranks and micro-steps
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;  // optimizer steps done
  // SyncBatchNorm: sums batch statistics over the replicas (unset: every rank normalises by its own batch).
  std::function<void(const Tensor&)> sum_over_replicas_;
  int blas_threads_ = 1;

  // The step in progress: the model's run context, and the real samples per rank of its global
  // batch (the loss gradient's normaliser).
  nn::RunCtx run_;
  double normalizer_ = 1;
  Tensor dlogits_;
  // Loader threads gather batches ahead (data.workers, data.prefetch); declared
  // after the datasets and the sampler, so they stop before those go away.
  std::unique_ptr<data::Loader> train_loader_, val_loader_;
  std::string loader_note_;  // decoded images: what the loader delivers (start-up report), else empty
  // This rank's open logging window (its step field unused), and the last step's numbers.
  LogWindowSums window_;
  StepTimes window_times_;
  double last_grad_norm_ = 0, last_lr_ = 0;

  // Checkpoints and early stops.
  StopSignals signals_{false};  // left installed until the process exits (see StopSignals)
  CheckpointPolicy policy_;
  std::optional<ckpt::Resume> resume_;           // rank 0, between the two resume phases
  size_t resume_rss0_ = 0;                       // every rank: resident memory before the resume
  double resume_t0_ = 0;                         // and when it began (dist::monotonic_seconds)
  std::unique_ptr<ckpt::AsyncWriter> writer_;    // ckpt.async: every rank (rank 0 writes, the others send)
  std::shared_ptr<ckpt::ShardChannel> channel_;  // several ranks: where the shards travel at a save
  std::unique_ptr<Tracer> tracer_;               // log.trace (always set; off when the option is empty)
  int64_t last_failed_write_ = -1;               // rank 0: the step of the latest failed write
  double last_write_seconds_ = 0;                // rank 0: the latest write's duration (deadline estimate)
  int pending_write_failure_ = 0;                // rank 0: EXIT_IO seen outside a vote (finish_trace)
  int exit_code_ = 0;
};

}  // namespace hpc::train
