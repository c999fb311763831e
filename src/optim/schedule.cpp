// Learning-rate schedules: closed-form functions of the step index (no state
// to checkpoint, so a resumed run gets the same lr as an uninterrupted one).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "core/error.h"

namespace hpc::optim {

namespace {

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

void require(bool ok, const std::string& msg) {
  if (!ok) throw UserError(msg);
}

}  // namespace

LrSchedule::LrSchedule(const OptimConfig& cfg, double peak_lr, int64_t total_steps)
    : peak_(peak_lr),
      min_lr_(cfg.min_lr),
      gamma_(cfg.gamma),
      warmup_(cfg.warmup_steps),
      step_every_(cfg.step_every),
      kind_(cfg.schedule) {
  require(std::isfinite(peak_lr) && peak_lr >= 0, "optim.lr must be ≥ 0, got " + num(peak_lr));
  require(warmup_ >= 0, "optim.warmup_steps must be ≥ 0, got " + std::to_string(warmup_));
  HPC_ASSERT(total_steps >= 0, "schedule: total steps " + std::to_string(total_steps));
  if (kind_ == ScheduleKind::Step) {
    require(step_every_ > 0, "optim.step_every must be > 0, got " + std::to_string(step_every_));
    require(std::isfinite(gamma_) && gamma_ > 0, "optim.gamma must be > 0, got " + num(gamma_));
  }
  if (kind_ == ScheduleKind::Cosine)
    require(std::isfinite(min_lr_) && min_lr_ >= 0 && min_lr_ <= peak_lr,
            "optim.min_lr must be in [0, lr = " + num(peak_lr) + "], got " + num(min_lr_));
  // A run no longer than its warmup never reaches the cosine part; 1 avoids dividing by zero.
  decay_steps_ = std::max<int64_t>(total_steps - warmup_, 1);
}

double LrSchedule::lr_at(int64_t step) const {
  HPC_ASSERT(step >= 0, "schedule: negative step " + std::to_string(step));
  if (step < warmup_) return peak_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  const int64_t t = step - warmup_;
  switch (kind_) {
    case ScheduleKind::Constant:
      return peak_;
    case ScheduleKind::Step:
      // NOLINTNEXTLINE(bugprone-integer-division): floor(t / step_every) on purpose (PyTorch StepLR)
      return peak_ * std::pow(gamma_, static_cast<double>(t / step_every_));
    case ScheduleKind::Cosine: {
      const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(decay_steps_));
      return min_lr_ + (peak_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return peak_;
}

double scaled_lr(const OptimConfig& cfg, int64_t global_batch, std::string* explanation) {
  require(std::isfinite(cfg.lr) && cfg.lr >= 0, "optim.lr must be ≥ 0, got " + num(cfg.lr));
  double lr = cfg.lr;
  std::string text;
  if (cfg.lr_scaling == LrScaling::None) {
    text = "lr " + num(lr) + " (optim.lr_scaling = none)";
  } else {
    require(cfg.base_batch > 0, "optim.base_batch must be > 0, got " + std::to_string(cfg.base_batch));
    HPC_ASSERT(global_batch > 0, "scaled_lr: global batch " + std::to_string(global_batch));
    lr = cfg.lr * static_cast<double>(global_batch) / static_cast<double>(cfg.base_batch);
    text = "linear scaling: lr " + num(cfg.lr) + " × " + std::to_string(global_batch) + "/" +
           std::to_string(cfg.base_batch) + " = " + num(lr);
  }
  if (explanation) *explanation = text;
  return lr;
}

}  // namespace hpc::optim
