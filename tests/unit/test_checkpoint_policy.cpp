// When a run checkpoints and stops (train/checkpoint_policy.h), without MPI
// or a clock: every rank's vote summed as the allreduce would, and the one
// decision drawn from it. ckpt.every_steps (not at the last step, not twice
// for one step), ckpt.every_minutes (on any rank's timer), a stop signal on
// one, some or all ranks (named in the reason), the deadline (from the
// timed steps, the evaluation the next step ends with, the save), rank 0's
// full disk first of all, a stop at the last step being the end of training,
// and a resumed step counting as saved.
#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

#include "train/checkpoint_policy.h"

namespace hpc::train {
namespace {

using Clock = CheckpointPolicy::Clock;
using Action = StopDecision::Action;

Clock::time_point at(Clock::time_point t0, double s) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The sum of every rank's vote, field by field: what the allreduce gives every rank.
StopVote summed(const std::vector<StopVote>& votes) {
  StopVote s;
  for (const StopVote& v : votes) {
    s.usr1_ranks += v.usr1_ranks, s.usr1_rank_sum += v.usr1_rank_sum;
    s.term_ranks += v.term_ranks, s.term_rank_sum += v.term_rank_sum;
    s.deadline_ranks += v.deadline_ranks, s.minutes_due_ranks += v.minutes_due_ranks;
    s.write_failure += v.write_failure, s.save_seconds += v.save_seconds;
  }
  return s;
}

CheckpointPolicy::Rules rules(int64_t every_steps, double every_minutes = 0, int64_t total = 100) {
  CheckpointPolicy::Rules r;
  r.every_steps = every_steps;
  r.every_minutes = every_minutes;
  r.total_steps = total;
  r.steps_per_epoch = 10;
  return r;
}

// The decision after `step` when each rank got `signals[rank]` (0: none).
StopDecision after(CheckpointPolicy& p, int64_t step, const std::vector<int>& signals,
                   Clock::time_point now) {
  std::vector<StopVote> votes;
  for (size_t r = 0; r < signals.size(); ++r) votes.push_back(p.vote(step, signals[r], int(r), now));
  return p.decide(summed(votes), step, int(signals.size()), now);
}

TEST(CheckpointPolicy, EveryStepsBeforeTheLastAndOncePerStep) {
  const auto t0 = Clock::now();
  CheckpointPolicy p(rules(25), Deadline(0, nullptr, t0, 0));
  p.start(t0);
  std::vector<int64_t> saved;
  for (int64_t step = 1; step <= 100; ++step) {
    const StopDecision d = after(p, step, {0, 0}, t0);
    EXPECT_NE(d.action, Action::Stop);
    if (d.action == Action::Checkpoint) {
      EXPECT_EQ(d.why, "every 25 steps");
      saved.push_back(step);
      p.saved(step, t0);
      EXPECT_EQ(after(p, step, {0, 0}, t0).action, Action::Continue) << "step " << step << " saved twice";
    }
  }
  EXPECT_EQ(saved, (std::vector<int64_t>{25, 50, 75}));  // step 100 is the end: the run saves it itself
  EXPECT_EQ(p.periodic(), "every 25 steps, ");
}

TEST(CheckpointPolicy, EveryMinutesOnAnyRanksTimer) {
  const auto t0 = Clock::now();
  CheckpointPolicy p(rules(0, 10), Deadline(0, nullptr, t0, 0));
  p.start(t0);
  EXPECT_EQ(after(p, 3, {0, 0, 0}, at(t0, 599)).action, Action::Continue);
  // One rank's timer past ten minutes is enough: its vote counts.
  std::vector<StopVote> votes = {p.vote(4, 0, 0, at(t0, 599)), p.vote(4, 0, 1, at(t0, 601))};
  const StopDecision d = p.decide(summed(votes), 4, 2, at(t0, 601));
  EXPECT_EQ(d.action, Action::Checkpoint);
  EXPECT_EQ(d.why, "every 10m00s");
  p.saved(4, at(t0, 602));  // the timer starts again from the save
  EXPECT_EQ(after(p, 5, {0, 0}, at(t0, 1100)).action, Action::Continue);
  EXPECT_EQ(after(p, 6, {0, 0}, at(t0, 1203)).action, Action::Checkpoint);
}

TEST(CheckpointPolicy, SignalsStopAndNameTheirRanks) {
  const auto t0 = Clock::now();
  CheckpointPolicy p(rules(0), Deadline(0, nullptr, t0, 0));
  p.start(t0);
  StopDecision d = after(p, 7, {0, 0, 0, SIGUSR1}, t0);
  EXPECT_EQ(d.action, Action::Stop);
  EXPECT_EQ(d.why, "SIGUSR1 on rank 3");
  d = after(p, 7, {SIGTERM, SIGTERM, SIGTERM, SIGTERM}, t0);
  EXPECT_EQ(d.why, "SIGTERM on all 4 ranks");
  d = after(p, 7, {0, SIGUSR1, SIGTERM, SIGUSR1}, t0);
  EXPECT_EQ(d.why, "SIGUSR1 on 2 of 4 ranks, SIGTERM on rank 2");
  // At the last step a stop is just the end of training (exit 0, the final checkpoint).
  EXPECT_EQ(after(p, 100, {SIGUSR1, 0}, t0).action, Action::Continue);
}

TEST(CheckpointPolicy, ADiskFullWriteStopsFirst) {
  const auto t0 = Clock::now();
  CheckpointPolicy p(rules(5), Deadline(0, nullptr, t0, 0));
  p.start(t0);
  std::vector<StopVote> votes = {p.vote(5, SIGUSR1, 0, t0), p.vote(5, 0, 1, t0)};
  votes[0].write_failure = 74;  // rank 0's background write found the disk full
  EXPECT_EQ(p.decide(summed(votes), 5, 2, t0).action, Action::StopDiskFull);
}

TEST(CheckpointPolicy, DeadlineFromStepsEvaluationAndSave) {
  const auto t0 = Clock::now();
  CheckpointPolicy::Rules r = rules(0);
  r.evaluates = true;
  CheckpointPolicy p(r, Deadline(100, nullptr, t0, 0));
  p.start(t0);
  p.deadline().set_save_seconds(2);  // a save takes 2 s
  p.step_ended(1, at(t0, 4));        // steps take 4 s: 1.5 × (4 + 2) + 1 = 10 s needed
  p.resume_stepping(at(t0, 4));
  EXPECT_EQ(after(p, 1, {0, 0}, at(t0, 89)).action, Action::Continue);
  const StopDecision d = after(p, 1, {0, 0}, at(t0, 91));
  EXPECT_EQ(d.action, Action::Stop);
  EXPECT_EQ(d.why.rfind("deadline: train.time_limit", 0), 0u) << d.why;
  EXPECT_NE(d.why.find("9.0 s left"), std::string::npos) << d.why;
  // Rank 0's last background write took 30 s: every rank's estimate of a save grows with it.
  std::vector<StopVote> votes = {p.vote(2, 0, 0, at(t0, 40)), p.vote(2, 0, 1, at(t0, 40))};
  votes[0].save_seconds = 30;
  EXPECT_EQ(p.decide(summed(votes), 2, 2, at(t0, 40)).action, Action::Continue);
  EXPECT_EQ(after(p, 2, {0, 0}, at(t0, 50)).action, Action::Stop);  // 1.5 × (4 + 30) + 1 > 50 s left
  // Step 9 ends the epoch before step 10's evaluation: that one must fit too.
  CheckpointPolicy q(r, Deadline(100, nullptr, t0, 0));
  q.start(t0);
  q.step_ended(9, at(t0, 4));
  q.resume_stepping(at(t0, 4));
  q.step_ended(10, at(t0, 28));  // the epoch's end took 24 s: an evaluation of about 20 s
  q.resume_stepping(at(t0, 28));
  EXPECT_EQ(after(q, 18, {0}, at(t0, 80)).action, Action::Continue);
  EXPECT_EQ(after(q, 19, {0}, at(t0, 80)).action, Action::Stop);
}

TEST(CheckpointPolicy, AResumedStepCountsAsSavedUntilItsWriteFails) {
  const auto t0 = Clock::now();
  CheckpointPolicy p(rules(10), Deadline(0, nullptr, t0, 0));
  p.resumed_at(30);
  p.start(t0);
  EXPECT_EQ(p.last_saved_step(), 30);
  EXPECT_EQ(after(p, 30, {0}, t0).action, Action::Continue);
  p.saved(40, t0);
  p.unsaved(30);  // an older step's failure changes nothing
  EXPECT_EQ(p.last_saved_step(), 40);
  p.unsaved(40);  // the snapshot of step 40 never reached disk
  EXPECT_EQ(p.last_saved_step(), -1);
  EXPECT_EQ(after(p, 40, {0}, t0).action, Action::Checkpoint);
}

}  // namespace
}  // namespace hpc::train
