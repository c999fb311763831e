// Runs every stage's action list (pipeline_schedule.h) against the others on
// a fake clock, to prove a schedule right before a runtime trusts it and to
// estimate its bubble. A Forward costs forward_cost, a Backward
// backward_cost, messages are instant; a receive waits until its matching
// send has happened. Messages between two stages of one kind (activation or
// gradient) match in order, as point-to-point calls between two ranks do.
//
// The run fails (SimResult::error) on a deadlock (no stage can go on), a
// receive that does not match the next message sent to it (wrong micro-batch,
// chunk or stage), a message never received, a forward without its input or
// a backward without its forward or output gradient, or a stage that does not
// run each (micro-batch, chunk)'s forward and backward exactly once.
#pragma once

#include <string>
#include <vector>

#include "train/pipeline_schedule.h"

namespace hpc::train {

struct SimResult {
  std::string error;       // empty when the schedule is sound
  long makespan = 0;       // when the last stage finishes
  std::vector<long> busy;  // per stage: time spent in Forward and Backward
  std::vector<long> idle;  // per stage: makespan − busy (the bubble)
  std::vector<int> peak;   // per stage: peak_in_flight of its list
};

// lists[r] is stage r's list; virtual_chunks the V the lists were built with.
SimResult simulate_pipeline(const std::vector<std::vector<PipeAction>>& lists, int micro_batches,
                            int virtual_chunks, long forward_cost = 1, long backward_cost = 2);

}  // namespace hpc::train
