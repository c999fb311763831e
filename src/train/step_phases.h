// StepPhases: the phases of one training step — data wait, host to device,
// forward, loss, backward, gradient wait, optimizer — each timed once, on one
// clock (dist::monotonic_seconds), and fed to both the step table's columns
// (StepTimes: data, compute, comm) and, on traced steps, the timeline (a
// trace span and an NVTX range per phase, and the step's own span: trace.h).
//
// A phase is a scope, so the step reads as its algorithm and the phase ends
// however the scope is left:
//     { const auto p = phases.enter(Phase::Forward); model.forward(...); }
// Forward and backward record no span of their own: the model reports each
// layer's (Trainer's layer hook), which is what the trace shows.
#pragma once

#include <cstdint>

#include "train/trace.h"

namespace hpc::train {

// Seconds per step-table column, summed over a step's phases (and over a logging window).
struct StepTimes {
  double data = 0, compute = 0, comm = 0;
  double gather = 0;  // of comm: dist.zero 3's waits for parameter gathers (gather_ms)
  double bubble = 0;  // of comm: a pipeline stage's waits for its neighbours' messages (bubble_ms)
  StepTimes& operator+=(const StepTimes& o) {
    data += o.data, compute += o.compute, comm += o.comm, gather += o.gather, bubble += o.bubble;
    return *this;
  }
};

// PipeWait: a pipeline stage waiting for an activation or a gradient from its neighbour (the bubble).
enum class Phase { DataWait, HostToDevice, Forward, Loss, Backward, GradientWait, Optimizer, PipeWait };

class StepPhases {
 public:
  // Opens step `step` (1-based) on the tracer; times add into `times`.
  StepPhases(Tracer& tracer, StepTimes& times, int64_t step);
  // The step's span ("step N") and the end of its NVTX ranges.
  ~StepPhases();
  StepPhases(const StepPhases&) = delete;
  StepPhases& operator=(const StepPhases&) = delete;

  class Scope {
   public:
    Scope(StepPhases& owner, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepPhases& owner_;
    Phase phase_;
    double t0_;
  };
  [[nodiscard]] Scope enter(Phase phase) { return Scope(*this, phase); }

  // Seconds of a compute phase spent waiting for communication (ZeRO's parameter all-gathers,
  // which forward waits for layer by layer): counted as comm, not compute.
  void count_as_comm(double seconds) {
    times_.compute -= seconds;
    times_.comm += seconds;
  }

 private:
  Tracer& tracer_;
  StepTimes& times_;
  int64_t step_;
  double t0_;
};

}  // namespace hpc::train
