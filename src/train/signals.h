// What makes a run stop early and ask to be requeued: a signal, or a
// deadline that the next step would not meet.
//
// StopSignals: SIGUSR1 and SIGTERM (Slurm --signal, preemption, scancel)
// only record that they arrived, in a lock-free atomic: the one thing an
// async-signal-safe handler may do. The trainer looks at it at every step
// boundary; ranks agree (one tiny allreduce), checkpoint, exit 75. Further
// signals while saving change nothing: the flag is already set, and
// SA_RESTART restarts the interrupted write.
//
// Deadline: train.time_limit seconds from the start of the run, and the Slurm
// job's end time (SLURM_JOB_END_TIME, Unix seconds; the sbatch scripts set it
// once from squeue where Slurm does not) minus a margin for exiting and
// requeueing. The run stops when the next step, the evaluation it may end
// with and a checkpoint would not all fit before it.
#pragma once

#include <signal.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace hpc::train {

class StopSignals {
 public:
  // Installs the handlers (and clears the flag). One instance at a time.
  // restore: the destructor puts the previous handlers back. The trainer
  // passes false: Slurm signals every task, and a late SIGTERM that met the
  // default action during MPI_Finalize would turn a checkpointed exit 75 into
  // a kill (143). Left installed, the handler only sets a flag nobody reads.
  explicit StopSignals(bool restore = true);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received (SIGUSR1 or SIGTERM), 0 when none.
  int received() const;
  static std::string name(int signo);  // "SIGUSR1"

 private:
  bool restore_;
  std::array<struct sigaction, 2> previous_{};  // SIGUSR1, SIGTERM
};

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  // Seconds kept free before the Slurm job's end: the run must exit and the
  // batch script call `scontrol requeue` before Slurm kills the job.
  static constexpr double SLURM_END_MARGIN_S = 20;
  // Added to every estimate: scheduling jitter, a step slower than the last ones.
  static constexpr double SLACK_S = 1;

  // time_limit_s 0: none. job_end: the value of SLURM_JOB_END_TIME (nullptr or
  // not a positive integer: none). `start` is when the limit starts counting.
  Deadline(double time_limit_s, const char* job_end, Clock::time_point start, double now_unix);

  bool active() const { return active_; }
  // "train.time_limit (600 s)" or "the Slurm job's end (SLURM_JOB_END_TIME)", whichever comes first.
  const std::string& source() const { return source_; }
  double seconds_left(Clock::time_point now) const;

  // Wall time of the interval since the previous step boundary; with_eval:
  // it ended with an evaluation (kept apart: only epoch ends pay for it).
  void add_interval(double seconds, bool with_eval);
  void set_save_seconds(double seconds) { save_s_ = seconds; }
  // True when one more step (plus an evaluation when next_has_eval) and a
  // checkpoint would end past the deadline: 1.5 × their estimates + SLACK_S.
  bool next_would_pass(bool next_has_eval, Clock::time_point now) const;

 private:
  bool active_ = false;
  Clock::time_point deadline_;
  std::string source_;
  double step_s_ = 0, eval_s_ = 0, save_s_ = 0;
};

}  // namespace hpc::train
