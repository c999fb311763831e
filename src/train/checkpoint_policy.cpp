// The checkpoint and stop rules (see checkpoint_policy.h).
#include "train/checkpoint_policy.h"

#include <signal.h>

#include <cstdio>

#include "train/progress.h"

namespace hpc::train {

namespace {

double seconds_between(CheckpointPolicy::Clock::time_point a, CheckpointPolicy::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// "SIGUSR1 on rank 3", "… on all 4 ranks", "… on 2 of 4 ranks".
std::string signal_source(int signo, int64_t ranks, int64_t rank_sum, int world) {
  const std::string where = ranks == 1 ? "rank " + std::to_string(rank_sum)
                            : ranks == world
                                ? "all " + std::to_string(world) + " ranks"
                                : std::to_string(ranks) + " of " + std::to_string(world) + " ranks";
  return StopSignals::name(signo) + " on " + where;
}

}  // namespace

void CheckpointPolicy::step_ended(int64_t step, Clock::time_point now) {
  const bool ended_epoch = step % rules_.steps_per_epoch == 0 || step == rules_.total_steps;
  deadline_.add_interval(seconds_between(last_boundary_, now), ended_epoch && rules_.evaluates);
}

StopVote CheckpointPolicy::vote(int64_t step, int signo, int rank, Clock::time_point now) const {
  const int64_t next = step + 1;
  const bool next_has_eval =
      rules_.evaluates && (next % rules_.steps_per_epoch == 0 || next == rules_.total_steps);
  StopVote v;
  v.usr1_ranks = signo == SIGUSR1 ? 1 : 0;
  v.usr1_rank_sum = signo == SIGUSR1 ? rank : 0;
  v.term_ranks = signo == SIGTERM ? 1 : 0;
  v.term_rank_sum = signo == SIGTERM ? rank : 0;
  v.deadline_ranks = deadline_.next_would_pass(next_has_eval, now) ? 1 : 0;
  v.minutes_due_ranks =
      rules_.every_minutes > 0 && seconds_between(last_saved_time_, now) >= 60 * rules_.every_minutes ? 1 : 0;
  return v;
}

StopDecision CheckpointPolicy::decide(const StopVote& all, int64_t step, int world, Clock::time_point now) {
  if (all.save_seconds > 0) deadline_.set_save_seconds(all.save_seconds);
  if (all.write_failure != 0)
    return {StopDecision::Action::StopDiskFull, "a background write found the disk full"};
  const bool before_end = step < rules_.total_steps;  // a stop at the last step is just the end of training
  if ((all.usr1_ranks > 0 || all.term_ranks > 0 || all.deadline_ranks > 0) && before_end) {
    std::string why;
    if (all.usr1_ranks > 0) why = signal_source(SIGUSR1, all.usr1_ranks, all.usr1_rank_sum, world);
    if (all.term_ranks > 0)
      why += (why.empty() ? "" : ", ") + signal_source(SIGTERM, all.term_ranks, all.term_rank_sum, world);
    if (why.empty()) {
      char left[48];
      std::snprintf(left, sizeof left, ", %.1f s left", deadline_.seconds_left(now));
      why = "deadline: " + deadline_.source() + left;
    }
    return {StopDecision::Action::Stop, why};
  }
  const bool every_steps = rules_.every_steps > 0 && step % rules_.every_steps == 0;
  if ((every_steps || all.minutes_due_ranks > 0) && before_end && step != last_saved_)
    return {StopDecision::Action::Checkpoint, every_steps
                                                  ? "every " + std::to_string(rules_.every_steps) + " steps"
                                                  : "every " + format_duration(60 * rules_.every_minutes)};
  return {};
}

void CheckpointPolicy::saved(int64_t step, Clock::time_point now, double write_seconds) {
  last_saved_ = step;
  last_saved_time_ = now;
  if (write_seconds > 0) deadline_.set_save_seconds(write_seconds);
}

std::string CheckpointPolicy::periodic() const {
  std::string when;
  if (rules_.every_steps > 0) when += "every " + std::to_string(rules_.every_steps) + " steps, ";
  if (rules_.every_minutes > 0) when += "every " + format_duration(60 * rules_.every_minutes) + ", ";
  return when;
}

}  // namespace hpc::train
