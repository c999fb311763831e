// Can this run continue from that checkpoint?
//
// Refused (UserError, exit 2, one line): another model (spec, input shape,
// parameter count, buffers), another optimizer, or another global batch
// unless ckpt.allow_reshard is set. Allowed: another number of ranks with
// the same global batch (the sampler deals the same global batches, so only
// float summation order changes), and with allow_reshard another global
// batch (the position is carried over in samples; not bit-exact).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"

namespace hpc::ckpt {

// The current run, as far as resuming cares.
struct RunLayout {
  std::string spec;
  Shape input_shape;
  int64_t num_params = 0;
  std::vector<std::pair<std::string, int64_t>> buffers;  // name, element count
  std::string optimizer;
  std::vector<std::string> optimizer_state;  // state buffer names
  int64_t world_size = 1, batch_size = 0, accum_steps = 1, global_batch = 0;
  int64_t train_samples = 0, steps_per_epoch = 0;
  uint64_t seed = 0;
  bool allow_reshard = false;
};

// Throws UserError naming `path` for a checkpoint this run cannot continue
// from. Returns notes for what is allowed but worth a line in the log.
std::vector<std::string> check_resumable(const Checkpoint& c, const std::string& path, const RunLayout& run);

// The optimizer step this run continues at. The same global batch keeps the
// checkpoint's step; another one (allow_reshard) keeps the epoch and maps the
// position within it by samples, rounded up so no sample is seen twice.
int64_t resume_step(const Checkpoint& c, const RunLayout& run);

}  // namespace hpc::ckpt
