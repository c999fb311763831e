// The checkpoints of one run directory: names, the newest valid one, pruning.
//
// A checkpoint is RUN_DIR/ckpt-STEP.h5 with STEP zero-padded to 8 digits, so
// `ls` lists them in step order; any number of digits is accepted on reading.
// Temporary files (ckpt-….h5.tmp-PID) and files set aside (.stale) never
// match, so a crash in the middle of a write is invisible to --resume auto.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"

namespace hpc::ckpt {

struct StoredCheckpoint {
  int64_t step = 0;
  std::string path;
};

std::string checkpoint_path(const std::string& dir, int64_t step);

// The checkpoints in `dir`, newest (highest step) first. A missing directory has none.
std::vector<StoredCheckpoint> list_checkpoints(const std::string& dir);

struct Found {
  std::optional<Checkpoint> checkpoint;  // empty: nothing valid
  std::string path;
  std::vector<std::string> skipped;  // "PATH: reason" for every newer file that failed to read
};

// The newest checkpoint in `dir` that reads and verifies (flat: read_checkpoint's). Files that fail
// are listed in `skipped` with their one-line reason.
Found find_newest_valid(const std::string& dir, FlatData flat = FlatData::Load);

// After a checkpoint at `written_step` was written: checkpoints with a higher
// step belong to a timeline this run abandoned (it resumed from an older
// one) and would win the next --resume auto, so they are renamed to
// PATH.stale; of the rest, all but the `keep` newest are deleted. Leftover
// temporary files of dead writers are removed. Returns one line per action
// taken (for the log); failures are reported the same way, never thrown.
std::vector<std::string> prune(const std::string& dir, int64_t written_step, int keep);

}  // namespace hpc::ckpt
