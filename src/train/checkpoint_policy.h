// When a run checkpoints and when it stops early: the rules every rank applies
// at every step boundary, kept apart from the collectives and files that carry
// them out (trainer_checkpoint.cpp) so that they are tested without MPI or a
// clock (test_checkpoint_policy).
//
// After each step every rank votes (vote()): the stop signal it got, whether
// its deadline would pass during the next step, whether ckpt.every_minutes has
// elapsed; rank 0 adds its background write's failure and its latest write's
// duration. The votes are summed over the ranks (one allreduce of a
// StopVote, protocol.h), and every rank draws the same decision from the sum
// (decide()):
//   - a background write found the disk full: stop now (EXIT_IO), the last
//     checkpoint intact;
//   - a signal or the deadline, before the last step: checkpoint and stop
//     (exit 75, requeue me);
//   - ckpt.every_steps or ckpt.every_minutes, before the last step and unless
//     this step is saved already: checkpoint and go on;
//   - otherwise go on. The end of training saves on its own (Trainer::run).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "train/protocol.h"
#include "train/signals.h"

namespace hpc::train {

struct StopDecision {
  enum class Action { Continue, Checkpoint, Stop, StopDiskFull };
  Action action = Action::Continue;
  std::string why;  // Checkpoint: "every 100 steps"; Stop: "SIGUSR1 on rank 1", "deadline: …, 3.5 s left"
};

class CheckpointPolicy {
 public:
  using Clock = std::chrono::steady_clock;

  struct Rules {
    int64_t every_steps = 0;   // ckpt.every_steps (0: off)
    double every_minutes = 0;  // ckpt.every_minutes (0: off)
    int64_t total_steps = 0, steps_per_epoch = 1;
    bool evaluates = false;  // an evaluation closes every epoch (the deadline must fit it too)
  };

  CheckpointPolicy(const Rules& rules, Deadline deadline) : rules_(rules), deadline_(std::move(deadline)) {}
  // The rules, once the run's step counts are known (the deadline counts from construction).
  void set_rules(const Rules& rules) { rules_ = rules; }

  // A resume continues at `step`, which its checkpoint holds: no need to save it again.
  void resumed_at(int64_t step) { last_saved_ = step; }
  // Training starts (after set-up and any resume): the step and checkpoint timers start now.
  void start(Clock::time_point now) { last_boundary_ = last_saved_time_ = now; }

  // Step `step` (1-based: the steps done) has ended at `now`: its time feeds the deadline's estimate.
  void step_ended(int64_t step, Clock::time_point now);
  // This rank's vote after step `step` (rank 0 adds its writes' fields, see StopVote).
  StopVote vote(int64_t step, int signo, int rank, Clock::time_point now) const;
  // The decision of every rank from the votes summed over the `world` ranks.
  StopDecision decide(const StopVote& all, int64_t step, int world, Clock::time_point now);
  // The boundary's own work (a save) is done: the next step's time starts now.
  void resume_stepping(Clock::time_point now) { last_boundary_ = now; }

  // A checkpoint of `step` was taken at `now`; with the seconds it held training up when it was
  // written there and then (a background write reports its time through the vote).
  void saved(int64_t step, Clock::time_point now, double write_seconds = 0);
  // The snapshot of `step` never reached disk (a background write failed): it is not saved.
  void unsaved(int64_t step) {
    if (step == last_saved_) last_saved_ = -1;
  }
  int64_t last_saved_step() const { return last_saved_; }

  // "every 100 steps, every 10 min, " (empty when neither rule is on), for the start-up line.
  std::string periodic() const;
  Deadline& deadline() { return deadline_; }
  const Deadline& deadline() const { return deadline_; }

 private:
  Rules rules_;
  Deadline deadline_;
  int64_t last_saved_ = -1;
  Clock::time_point last_saved_time_{}, last_boundary_{};
};

}  // namespace hpc::train
