// The job script's sign that training started: HPCTRAIN_STARTED_FILE.
//
// A step that dies before training starts (in MPI_Init, reading the data,
// building the model, reading the checkpoint) lost nothing but its start, so
// slurm/common.sh requeues its job a bounded number of times; one that dies in
// training ends it as before (docs/checkpoints.md, "A crash at start-up"). The
// script cannot see the difference in an exit status (a crash is a signal
// either way), so it names a file in HPCTRAIN_STARTED_FILE, and hpctrain
// creates it once every rank has agreed that set-up and resume succeeded.
//
// The first rank of each node writes it, rather than rank 0 alone or every
// rank: the batch shell that looks for it runs on the job's first node, and
// where the file's directory is not shared between nodes only the ranks there
// can make it visible to that shell; on a shared file system, thousands of
// ranks creating one file at once would be a metadata storm for nothing.
#pragma once

#include "dist/context.h"

namespace hpc::train {

// Creates the file named by HPCTRAIN_STARTED_FILE (nothing when unset), with
// one line saying where; first rank of each node only. Best effort: a file that
// cannot be written (its directory exists on another node only) is left out
// silently, and the script then takes a later death for one at start-up, which
// it requeues a bounded number of times.
void note_training_started(const dist::Context& ctx);

}  // namespace hpc::train
