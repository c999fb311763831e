// Test-only fault injection: one hook, inert unless HPCTRAIN_FAULT is set,
// that makes a chosen rank fail in a chosen way at a chosen point, so that
// every failure path (disk full, a bad disk, a dead or stuck peer, a signal
// at the worst moment) can be tested end to end on any machine.
//
//   HPCTRAIN_FAULT="KIND@POINT[:RANK[:STEP]][,KIND@POINT…]"
//
//   KIND     what happens
//     enospc   the write fails with ENOSPC ("no space left on device")
//     eio      the read fails with EIO ("input/output error")
//     stall    the rank stops calling collectives (sleeps, as a rank stuck in
//              a computation would; exits EXIT_PEER after an hour at most)
//     exit     the rank kills itself with SIGKILL (like `kill -9`, a dead node)
//     sigusr1, sigterm, sigint
//              raise(SIG…) in the rank's main thread, at that very point
//   POINT    where (and which kinds it takes)
//     step         an optimizer step begins              stall exit sig*
//     backward     during backward, after the first layer sig*
//     allreduce    gradient buckets in flight (GradReducer::finish) sig*
//     ckpt_write   half-way through writing the checkpoint file (HDF5 data)
//                                                         enospc sig*
//     ckpt_close   closing (flushing) it                  enospc
//     ckpt_fsync   fsync of the temporary file            enospc
//     ckpt_rename  renaming it to its final name          enospc
//     metrics      appending to RUN_DIR/metrics.jsonl     enospc
//     data_read    reading samples (memory-mapped copy or H5Dread)  eio
//   RANK     the rank that fails; `*` or absent: every rank
//   STEP     the trainer's step (1-based, the step being computed or saved);
//            absent: the first time the point is reached. I/O faults stay on
//            from STEP (a full disk stays full); the others fire once. Loader
//            threads read ahead, so data_read:R:S fails the first read
//            started while rank R's trainer is at step S or later.
//
// Examples: "enospc@ckpt_write:0:20", "eio@data_read:1:5",
// "sigusr1@backward:1:7", "stall@step:1:4". The older variables still work:
// HPCTRAIN_TEST_STALL=R:S is stall@step:R:S, HPCTRAIN_TEST_EXIT=R:S is
// exit@step:R:S.
//
// Why a process-wide hook and not an object passed down: the points sit in
// the lowest I/O layers (checkpoint writer, dataset reads in loader threads,
// metrics), and threading a test-only parameter through every constructor
// would put it into production interfaces. The plan is installed once, by
// dist::Context before any thread starts, and is read-only afterwards; the
// only mutable state is atomics (the step, which one-shot faults fired). With
// HPCTRAIN_FAULT unset every point costs one relaxed atomic load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc::dist {

enum class FaultKind { Enospc, Eio, Stall, Exit, SigUsr1, SigTerm, SigInt };
enum class FaultPoint {
  Step,
  Backward,
  Allreduce,
  CkptWrite,
  CkptClose,
  CkptFsync,
  CkptRename,
  Metrics,
  DataRead
};

struct Fault {
  FaultKind kind = FaultKind::Exit;
  FaultPoint point = FaultPoint::Step;
  int rank = -1;     // -1: any rank
  int64_t step = 0;  // 0: the first time the point is reached
  std::string text;  // as written, for the log line when it fires
};

// Parses HPCTRAIN_FAULT (nullptr or "": none) and the older HPCTRAIN_TEST_STALL /
// HPCTRAIN_TEST_EXIT values. Throws UserError, one line naming the variable
// and what was expected, on a malformed value or a kind the point cannot take.
std::vector<Fault> parse_faults(const char* fault, const char* stall = nullptr, const char* exit = nullptr);

// Installs the plan of this process (called once, by dist::Context, before
// other threads start); `rank` is this process's rank.
void install_faults(std::vector<Fault> faults, int rank);
// Removes the plan (unit tests).
void clear_faults();

// The trainer's current step (Context::on_step): what STEP is compared with.
void set_fault_step(int64_t step);

// Called at `point`. Signals are raised and stalls/exits happen right here;
// for an I/O fault that applies, returns the errno the caller must fail with
// as it would for a real failure (ENOSPC, EIO); else 0. Thread-safe.
int fault_at(FaultPoint point);

// "ckpt_write", "enospc": the names used in HPCTRAIN_FAULT.
const char* fault_point_name(FaultPoint point);
const char* fault_kind_name(FaultKind kind);

}  // namespace hpc::dist
