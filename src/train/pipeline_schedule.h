// The per-stage action lists of one pipeline-parallel step: 1F1B and
// Megatron-LM's interleaved 1F1B (Narayanan et al., "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM", SC 2021).
//
// A list is what one stage does, in order: each Forward is preceded by the
// receive of its input (none on the first virtual stage) and followed by the
// send of its output (none on the last); each Backward is preceded by the
// receive of its output gradient (none on the last virtual stage, which starts
// from the loss) and followed by the send of its input gradient (none on the
// first). That is where a runtime posts them, so the lists are the runtime's
// plan and the simulator (pipeline_sim.h) can check them against each other.
//
// 1F1B: stage r runs min(P − r − 1, M) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards; at most
// min(P − r, M) micro-batches' activations are alive at once.
//
// Interleaved: stage r holds V model chunks; chunk c is virtual stage c·P + r.
// Micro-batches go in groups of P through chunk 0, then chunk 1, ... (the
// backwards through the chunks in reverse), which is why M must be a multiple
// of P. Warm-up is 2(P − r − 1) + (V − 1)·P forwards (all M·V of them when
// M = P), the order Megatron-LM's schedules.py uses; the bubble shrinks by V.
#pragma once

#include <string>
#include <vector>

namespace hpc::train {

enum class PipeOp { Forward, Backward, SendActivation, RecvActivation, SendGrad, RecvGrad };

struct PipeAction {
  PipeOp op;
  int micro;       // micro-batch index, 0..M-1
  int chunk;       // model chunk on this stage (virtual stage chunk·P + stage); 0 without interleaving
  int peer_stage;  // the stage a message goes to or comes from; -1 for Forward and Backward
};

// UserError (one line) for M < P; throws nothing for a valid shape.
std::vector<PipeAction> schedule_1f1b(int stages, int stage, int micro_batches);

// UserError for M < P or M not a multiple of P (the groups of P micro-batches).
std::vector<PipeAction> schedule_interleaved(int stages, int stage, int micro_batches, int virtual_chunks);

// The most forwards whose backward has not run yet, at any point of the list:
// the number of activation sets a stage holds at its peak.
int peak_in_flight(const std::vector<PipeAction>& actions);

// Warm-up forwards of a stage (the theory the tests hold the lists to).
int warmup_1f1b(int stages, int stage, int micro_batches);
int warmup_interleaved(int stages, int stage, int micro_batches, int virtual_chunks);

const char* pipe_op_name(PipeOp op);
std::string to_string(const PipeAction& action);  // "F m3 c1", "send-act m3 c1 -> 2"

}  // namespace hpc::train
