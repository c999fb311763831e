// Learning-rate schedules and batch-size scaling of the learning rate.
//
// A schedule maps the 0-based index of the optimizer step about to be taken
// to its learning rate. Every schedule starts with a linear warmup over
// optim.warmup_steps: step s < warmup gets peak·(s+1)/warmup, so the very
// first step already moves the weights (a warmup that starts at exactly 0
// would waste a step) and step warmup−1 reaches the peak. After warmup, with
// t = s − warmup counted from the end of the warmup:
//   constant  peak
//   step      peak · gamma^floor(t / step_every)
//   cosine    min_lr + (peak − min_lr)·(1 + cos(π·t/T))/2, T = total_steps − warmup
//             (Loshchilov & Hutter 2017, without restarts): peak at the first
//             step after warmup, min_lr at step total_steps, held there after.
// The step schedule counts from the end of the warmup too, so that warmup
// never shifts where the drops fall relative to the peak.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace hpc::optim {

class LrSchedule {
 public:
  // peak_lr is the learning rate after warmup (usually scaled_lr(cfg, …));
  // total_steps the run's total optimizer steps. Bad settings are a UserError.
  LrSchedule(const OptimConfig& cfg, double peak_lr, int64_t total_steps);

  double lr_at(int64_t step) const;

 private:
  double peak_, min_lr_, gamma_;
  int64_t warmup_, step_every_;
  ScheduleKind kind_;
  int64_t decay_steps_ = 1;
};

// The learning rate for a global batch: lr_scaling = linear gives
// lr × global_batch / base_batch (Goyal et al. 2017, "Accurate, Large
// Minibatch SGD"); none gives lr. explanation (if not null) receives one line
// for the start-up report, e.g. "linear scaling: lr 0.1 × 512/256 = 0.2".
double scaled_lr(const OptimConfig& cfg, int64_t global_batch, std::string* explanation);

}  // namespace hpc::optim
