// StepPhases (see step_phases.h).
#include "train/step_phases.h"

#include <string>

#include "dist/heartbeat.h"

namespace hpc::train {

namespace {

enum class Column { Data, Compute, Comm };

// What each phase is called on the timeline (NVTX and the trace), the trace category of its span
// (nullptr: none, its layers' spans stand for it), and the step-table column it counts in.
struct PhaseInfo {
  const char* name;
  const char* category;
  Column column;
};

constexpr PhaseInfo info(Phase p) {
  switch (p) {
    case Phase::DataWait:
      return {"data wait", "data", Column::Data};  // the data time the loader's threads did not hide
    case Phase::HostToDevice:
      return {"host to device", "h2d", Column::Compute};
    case Phase::Forward:
      return {"forward", nullptr, Column::Compute};
    case Phase::Loss:
      return {"loss", "loss", Column::Compute};
    case Phase::Backward:
      return {"backward", nullptr, Column::Compute};
    case Phase::GradientWait:
      return {"gradient wait", "comm", Column::Comm};  // the communication backward did not hide
    case Phase::Optimizer:
      return {"optimizer", "optimizer", Column::Compute};
    case Phase::PipeWait:
      return {"pipeline wait", "pipe", Column::Comm};  // also counted as the bubble
  }
  return {"?", nullptr, Column::Compute};
}

}  // namespace

StepPhases::StepPhases(Tracer& tracer, StepTimes& times, int64_t step)
    : tracer_(tracer), times_(times), step_(step), t0_(dist::monotonic_seconds()) {
  tracer_.set_step(step);
}

StepPhases::~StepPhases() {
  tracer_.span("step", "step " + std::to_string(step_), t0_, dist::monotonic_seconds());
  tracer_.end_step();
}

StepPhases::Scope::Scope(StepPhases& owner, Phase phase)
    : owner_(owner), phase_(phase), t0_(dist::monotonic_seconds()) {
  owner_.tracer_.phase(info(phase).name);
}

StepPhases::Scope::~Scope() {
  const double t1 = dist::monotonic_seconds();
  const PhaseInfo p = info(phase_);
  StepTimes& t = owner_.times_;
  (p.column == Column::Data ? t.data : p.column == Column::Comm ? t.comm : t.compute) += t1 - t0_;
  if (phase_ == Phase::PipeWait) t.bubble += t1 - t0_;
  if (p.category != nullptr) owner_.tracer_.span(p.category, p.name, t0_, t1);
  owner_.tracer_.phase(nullptr);
}

}  // namespace hpc::train
