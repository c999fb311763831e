// Trainer: one training run from a resolved Config, top to bottom.
//
// Per optimizer step: for each of accum_steps micro-batches, gather the
// rank's samples, forward, loss, backward (the last micro-step hands
// gradient buckets to the GradReducer as backward completes them); wait for
// the reduction; clip; learning rate from the schedule; fused optimizer
// step. Rank 0 prints the step table and writes metrics.jsonl; an evaluation
// closes every epoch when a validation split exists.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "data/h5_dataset.h"
#include "data/sampler.h"
#include "dist/context.h"
#include "dist/grad_reducer.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace hpc::train {

struct EvalResult {
  double loss = 0, acc = 0, top5 = -1;  // top5 < 0: not applicable (fewer than 10 classes)
  int64_t count = 0;
};

class Trainer {
 public:
  // Opens the data, builds the model and the optimizer. Throws UserError on bad input.
  Trainer(const Config& cfg, dist::Context& ctx);
  ~Trainer();

  // Versions, ranks, configuration, model summary (rank 0 prints; every rank must call).
  void print_header();
  // Trains to the configured total; returns the final evaluation (count 0 without validation data).
  EvalResult run();
  EvalResult evaluate();

  nn::Model& model() { return *model_; }

 private:
  struct StepTimes {
    double data = 0, compute = 0, comm = 0;
  };
  // One optimizer step over global batch `batch` of `epoch`. Adds to the running loss sums.
  void train_step(int64_t epoch, int64_t batch, StepTimes& t);
  void load_batch(const data::H5Dataset& ds, const int64_t* idx, int64_t n);
  void log_step(int64_t epoch, const StepTimes& t, double window_s);

  const Config& cfg_;
  dist::Context& ctx_;
  dist::Communicator& comm_;
  std::unique_ptr<data::H5Dataset> train_, val_;
  std::unique_ptr<data::DistributedSampler> sampler_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<nn::Loss> loss_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<dist::GradReducer> reducer_;
  MetricsLog metrics_;
  std::unique_ptr<Progress> progress_;
  std::string lr_note_;

  int64_t micro_batch_ = 0;     // per rank, per micro-step
  int64_t global_batch_ = 0;    // per optimizer step, all ranks and micro-steps
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;            // optimizer steps done
  double peak_lr_ = 0;
  bool sync_bn_ = false;
  int blas_threads_ = 1;

  Tensor x_, y_, dlogits_;
  std::vector<int64_t> indices_;
  // Sums over the current logging window (this rank): loss, samples, correct, grad norm.
  double win_loss_ = 0, win_count_ = 0, win_correct_ = 0, last_grad_norm_ = 0, last_lr_ = 0;
  int64_t win_steps_ = 0;
  StepTimes win_times_;
};

}  // namespace hpc::train
