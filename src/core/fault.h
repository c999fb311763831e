// Test-only fault injection: one hook, inert unless HPCTRAIN_FAULT is set,
// that makes a chosen rank fail in a chosen way at a chosen point, so that
// every failure path (disk full, a bad disk, a dead, stuck or slow peer, a
// signal at the worst moment) can be tested end to end on any machine.
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
//              raise(SIG…) in the calling thread, at that very point
//     abort    std::abort() there (SIGABRT: a failed assertion, a crash);
//              taken wherever sig* is
//     segv     raise(SIGSEGV) there (a crash such as a call through a null
//              pointer: killed by signal 11, Open MPI's banner, a core where
//              core dumps are on); taken wherever sig* is
//     sleep=MS the rank sleeps MS milliseconds there (a slow rank, a slow disk)
//     lesser   OPENBLAS_CORETYPE stands for OpenBLAS's own pick (a lesser core
//              the library chose), not for the user's choice
//     wrong    the BLAS self-check of a core hpctrain chose sees a wrong result
//   POINT    where (and which kinds it takes)
//     step         an optimizer step begins              stall exit sig* sleep
//     step_end     the step is done, before the ranks' stop vote
//                                                         stall exit sig* sleep
//     backward     during backward, after the first layer sig*
//     allreduce    gradient buckets in flight (GradReducer::finish) sig*
//     allgather    ZeRO's parameter all-gathers in flight (GradReducer::start_allgather)
//                                                         exit stall sig*
//     ckpt_write   half-way through writing the checkpoint file (HDF5 data)
//                                                         enospc exit sig* sleep
//     ckpt_close   closing (flushing) it                  enospc
//     ckpt_fsync   fsync of the temporary file            enospc
//     ckpt_rename  renaming it to its final name          enospc
//     metrics      appending to RUN_DIR/metrics.jsonl     enospc
//     data_read    reading samples (memory-mapped copy or H5Dread)  eio sleep
//     ring_send    hpctrain doctor's ring exchange, before each send  sleep
//     startup      MPI is up and this plan installed (dist::Context), before
//                  the data, the model and the checkpoint: training has not
//                  started                                 exit abort segv
//     blas_core    the start-up BLAS core check (before MPI)   lesser
//     blas_check   its sgemm self-check of a corrected core    wrong
//                  (both read HPCTRAIN_FAULT themselves with fault_planned(),
//                  since they run before MPI and dist::Context; RANK is the
//                  launcher's, STEP does not apply)
//   RANK     the rank that fails; `*` or absent: every rank
//   STEP     the trainer's step (1-based, the step being computed or saved);
//            for `startup`, the job's start instead: 1 the first,
//            SLURM_RESTART_COUNT + 1 a requeued Slurm job's (so a requeued job
//            can crash once at its restart and not again at the next);
//            absent: the first time the point is reached. I/O faults and
//            sleeps stay on from STEP (a full disk stays full, a slow rank
//            stays slow); the others fire once. Loader threads read ahead,
//            so data_read:R:S fails the first read started while rank R's
//            trainer is at step S or later.
//
// Examples: "enospc@ckpt_write:0:20", "eio@data_read:1:5",
// "sigusr1@step_end:1:21" (stop after step 21), "exit@ckpt_write:0:20" (die
// with half a file on disk), "sleep=30@step_end" (slow every step),
// "stall@step:1:4", "sleep=150@ring_send:1", "segv@startup:0:2" (rank 0
// crashes at the first restart of a requeued job, before training).
//
// Why a process-wide hook and not an object passed down: the points sit in
// every layer, down to the lowest I/O (checkpoint writer, dataset reads in
// loader threads, metrics), and threading a test-only parameter through
// every constructor would put it into production interfaces. It lives in
// core/ so that any folder may call it without depending on another. The
// plan is installed once (dist::Context, before any thread starts) and is
// read-only afterwards; the only mutable state is atomics (the step, which
// one-shot faults fired). With HPCTRAIN_FAULT unset every point costs one
// relaxed atomic load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc {

enum class FaultKind {
  Enospc,
  Eio,
  Stall,
  Exit,
  SigUsr1,
  SigTerm,
  SigInt,
  Sleep,
  Lesser,
  Wrong,
  Abort,
  Segv
};
enum class FaultPoint {
  Step,
  StepEnd,
  Backward,
  Allreduce,
  Allgather,
  CkptWrite,
  CkptClose,
  CkptFsync,
  CkptRename,
  Metrics,
  DataRead,
  RingSend,
  Startup,
  BlasCore,
  BlasCheck
};

struct Fault {
  FaultKind kind = FaultKind::Exit;
  FaultPoint point = FaultPoint::Step;
  int rank = -1;         // -1: any rank
  int64_t step = 0;      // 0: the first time the point is reached
  int64_t sleep_ms = 0;  // FaultKind::Sleep
  std::string text;      // as written, for the log line when it fires
};

// Parses a HPCTRAIN_FAULT value (nullptr or "": none). Throws UserError, one
// line naming the variable and what was expected, on a malformed value or a
// kind the point cannot take.
std::vector<Fault> parse_faults(const char* value);

// Installs the plan of this process (called once, by dist::Context, before
// other threads start); `rank` is this process's rank.
void install_faults(std::vector<Fault> faults, int rank);
// Removes the plan (unit tests).
void clear_faults();

// The trainer's current step (Context::on_step): what STEP is compared with.
void set_fault_step(int64_t step);

// While alive, fault points reached on the constructing thread compare STEP
// with `step` instead of the trainer's current step: the background
// checkpoint writer (ckpt/async_writer.cpp) saves step S while the trainer
// is already computing S+1, and its faults must still name S.
class FaultStepScope {
 public:
  explicit FaultStepScope(int64_t step);
  ~FaultStepScope();
  FaultStepScope(const FaultStepScope&) = delete;
  FaultStepScope& operator=(const FaultStepScope&) = delete;
};

// The job's start that `startup` faults compare STEP with: SLURM_RESTART_COUNT
// + 1 (1 outside Slurm and on a job's first start).
int64_t job_start_number();

// Called at `point`. Signals are raised and stalls, sleeps and exits happen
// right here; for an I/O fault that applies, returns the errno the caller
// must fail with as it would for a real failure (ENOSPC, EIO); else 0.
// Thread-safe.
int fault_at(FaultPoint point);

// Whether HPCTRAIN_FAULT plans `kind` at `point` for this process (the
// launcher's rank), parsed from the environment now: for the points that run
// before MPI and dist::Context (blas_core, blas_check). A malformed value
// counts as no plan here; dist::Context reports it as every run does.
bool fault_planned(FaultKind kind, FaultPoint point);

// "ckpt_write": a point's name in HPCTRAIN_FAULT.
const char* fault_point_name(FaultPoint point);

}  // namespace hpc
