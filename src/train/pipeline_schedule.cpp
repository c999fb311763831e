// Builds the action lists of pipeline_schedule.h. Both schedules are one
// sequence of forward "slots" k = 0..M·V−1 and backward slots in the same
// numbering; what differs is the warm-up length and, with V > 1, which
// (micro-batch, chunk) a slot means.
#include "train/pipeline_schedule.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hpc::train {
namespace {

void check_shape(int stages, int stage, int micro_batches, int virtual_chunks) {
  if (stages < 1) throw UserError("pipeline stages must be at least 1, got " + std::to_string(stages));
  if (virtual_chunks < 1)
    throw UserError("dist.pp_virtual must be at least 1, got " + std::to_string(virtual_chunks));
  HPC_ASSERT(stage >= 0 && stage < stages, "pipeline stage out of range");
  if (micro_batches < stages)
    throw UserError("train.micro_batches = " + std::to_string(micro_batches) +
                    " is fewer than dist.pp = " + std::to_string(stages) + " pipeline stages (need M >= P)");
}

struct Slot {
  int micro;
  int chunk;
};

// Slot k of the interleaved order: groups of P micro-batches go through
// chunk 0..V-1 (forward) or V-1..0 (backward) before the next group starts.
Slot slot_of(int k, int stages, int virtual_chunks, bool forward) {
  const int group_size = stages * virtual_chunks;
  const int in_group = k % group_size;
  const int chunk = in_group / stages;
  return {(k / group_size) * stages + in_group % stages, forward ? chunk : virtual_chunks - 1 - chunk};
}

class ListBuilder {
 public:
  ListBuilder(int stages, int stage, int virtual_chunks)
      : stages_(stages), stage_(stage), last_virtual_(stages * virtual_chunks - 1) {}

  void forward(Slot s) {
    const int v = s.chunk * stages_ + stage_;
    if (v > 0) list_.push_back({PipeOp::RecvActivation, s.micro, s.chunk, (v - 1) % stages_});
    list_.push_back({PipeOp::Forward, s.micro, s.chunk, -1});
    if (v < last_virtual_) list_.push_back({PipeOp::SendActivation, s.micro, s.chunk, (v + 1) % stages_});
  }
  void backward(Slot s) {
    const int v = s.chunk * stages_ + stage_;
    if (v < last_virtual_) list_.push_back({PipeOp::RecvGrad, s.micro, s.chunk, (v + 1) % stages_});
    list_.push_back({PipeOp::Backward, s.micro, s.chunk, -1});
    if (v > 0) list_.push_back({PipeOp::SendGrad, s.micro, s.chunk, (v - 1) % stages_});
  }
  std::vector<PipeAction> take() { return std::move(list_); }

 private:
  int stages_, stage_, last_virtual_;
  std::vector<PipeAction> list_;
};

std::vector<PipeAction> build(int stages, int stage, int micro_batches, int virtual_chunks, int warmup) {
  const int total = micro_batches * virtual_chunks;
  ListBuilder list(stages, stage, virtual_chunks);
  for (int k = 0; k < warmup; ++k) list.forward(slot_of(k, stages, virtual_chunks, true));
  // Steady state: one forward, then the oldest outstanding backward.
  for (int k = 0; k < total - warmup; ++k) {
    list.forward(slot_of(warmup + k, stages, virtual_chunks, true));
    list.backward(slot_of(k, stages, virtual_chunks, false));
  }
  for (int k = total - warmup; k < total; ++k) list.backward(slot_of(k, stages, virtual_chunks, false));
  return list.take();
}

}  // namespace

int warmup_1f1b(int stages, int stage, int micro_batches) {
  return std::min(stages - stage - 1, micro_batches);
}

int warmup_interleaved(int stages, int stage, int micro_batches, int virtual_chunks) {
  const int total = micro_batches * virtual_chunks;
  // With exactly P micro-batches there is no steady state to interleave
  // into: every forward runs first (Megatron-LM does the same).
  if (micro_batches == stages) return total;
  return std::min(2 * (stages - stage - 1) + (virtual_chunks - 1) * stages, total);
}

std::vector<PipeAction> schedule_1f1b(int stages, int stage, int micro_batches) {
  check_shape(stages, stage, micro_batches, 1);
  return build(stages, stage, micro_batches, 1, warmup_1f1b(stages, stage, micro_batches));
}

std::vector<PipeAction> schedule_interleaved(int stages, int stage, int micro_batches, int virtual_chunks) {
  check_shape(stages, stage, micro_batches, virtual_chunks);
  if (micro_batches % stages != 0)
    throw UserError("train.micro_batches = " + std::to_string(micro_batches) +
                    " is not a multiple of dist.pp = " + std::to_string(stages) +
                    " (the interleaved schedule runs micro-batches in groups of P)");
  return build(stages, stage, micro_batches, virtual_chunks,
               warmup_interleaved(stages, stage, micro_batches, virtual_chunks));
}

int peak_in_flight(const std::vector<PipeAction>& actions) {
  int alive = 0;
  int peak = 0;
  for (const PipeAction& a : actions) {
    if (a.op == PipeOp::Forward) peak = std::max(peak, ++alive);
    if (a.op == PipeOp::Backward) --alive;
  }
  return peak;
}

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::Forward:
      return "F";
    case PipeOp::Backward:
      return "B";
    case PipeOp::SendActivation:
      return "send-act";
    case PipeOp::RecvActivation:
      return "recv-act";
    case PipeOp::SendGrad:
      return "send-grad";
    case PipeOp::RecvGrad:
      return "recv-grad";
  }
  return "?";
}

std::string to_string(const PipeAction& action) {
  std::string s = std::string(pipe_op_name(action.op)) + " m" + std::to_string(action.micro) + " c" +
                  std::to_string(action.chunk);
  const bool sends = action.op == PipeOp::SendActivation || action.op == PipeOp::SendGrad;
  if (action.peer_stage >= 0) s += (sends ? " -> " : " <- ") + std::to_string(action.peer_stage);
  return s;
}

}  // namespace hpc::train
