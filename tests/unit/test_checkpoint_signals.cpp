// What stops a run early: the signal flag (first signal wins, later ones
// change nothing, the previous handlers come back), the deadline from
// train.time_limit and SLURM_JOB_END_TIME (earliest wins, bad values are
// ignored, the next step + evaluation + save must fit), and the test hooks.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>

#include "train/signals.h"

using hpc::train::Deadline;
using hpc::train::StopSignals;
using Clock = Deadline::Clock;

namespace {

std::atomic<int> previous_handler_calls{0};
extern "C" void counting_handler(int) { previous_handler_calls.fetch_add(1); }

Clock::time_point at(Clock::time_point t0, double s) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

TEST(StopSignals, FirstSignalWinsAndHandlersAreRestored) {
  struct sigaction mine {};
  mine.sa_handler = counting_handler;
  sigemptyset(&mine.sa_mask);
  struct sigaction saved_usr1 {
  }, saved_term{};
  sigaction(SIGUSR1, &mine, &saved_usr1);
  sigaction(SIGTERM, &mine, &saved_term);
  {
    StopSignals s;
    EXPECT_EQ(s.received(), 0);
    raise(SIGUSR1);
    EXPECT_EQ(s.received(), SIGUSR1);
    raise(SIGTERM);  // a second signal (e.g. while saving) changes nothing
    raise(SIGUSR1);
    EXPECT_EQ(s.received(), SIGUSR1);
    EXPECT_EQ(previous_handler_calls.load(), 0) << "ours replaced the previous handler";
    EXPECT_EQ(StopSignals::name(SIGUSR1), "SIGUSR1");
    EXPECT_EQ(StopSignals::name(SIGTERM), "SIGTERM");
  }
  raise(SIGUSR1);
  EXPECT_EQ(previous_handler_calls.load(), 1) << "the previous handler is back";
  {
    StopSignals again;
    EXPECT_EQ(again.received(), 0) << "a new instance starts clear";
    raise(SIGTERM);
    EXPECT_EQ(again.received(), SIGTERM);
  }
  sigaction(SIGUSR1, &saved_usr1, nullptr);
  sigaction(SIGTERM, &saved_term, nullptr);
}

TEST(Deadline, NoneUnlessAsked) {
  const auto t0 = Clock::now();
  for (const char* env : {static_cast<const char*>(nullptr), "", "soon", "-5", "0", "12x"}) {
    Deadline d(0, env, t0, 1e9);
    EXPECT_FALSE(d.active()) << (env ? env : "null");
    EXPECT_FALSE(d.next_would_pass(true, at(t0, 1e6)));
  }
}

TEST(Deadline, TimeLimitAndJobEndEarliestWins) {
  const auto t0 = Clock::now();
  const double now_unix = 1'700'000'000;
  Deadline limit(600, nullptr, t0, now_unix);
  ASSERT_TRUE(limit.active());
  EXPECT_NEAR(limit.seconds_left(t0), 600, 1e-6);
  EXPECT_NE(limit.source().find("train.time_limit"), std::string::npos);

  // The job ends in 300 s: minus the margin for exit and requeue.
  const std::string end = std::to_string(static_cast<long long>(now_unix) + 300);
  Deadline job(600, end.c_str(), t0, now_unix);
  EXPECT_NEAR(job.seconds_left(t0), 300 - Deadline::SLURM_END_MARGIN_S, 1e-6);
  EXPECT_NE(job.source().find("SLURM_JOB_END_TIME"), std::string::npos);
  Deadline later_job(100, end.c_str(), t0, now_unix);
  EXPECT_NEAR(later_job.seconds_left(t0), 100, 1e-6);
}

TEST(Deadline, StopsWhenTheNextStepEvalAndSaveWouldNotFit) {
  const auto t0 = Clock::now();
  Deadline d(100, nullptr, t0, 0);
  d.set_save_seconds(2);
  d.add_interval(4, false);  // steps take 4 s
  // Need 1.5 × (4 + 2) + 1 = 10 s.
  EXPECT_FALSE(d.next_would_pass(false, at(t0, 89.5)));
  EXPECT_TRUE(d.next_would_pass(false, at(t0, 90.5)));
  // An epoch end that took 24 s: the evaluation is about 20 s, paid only by the next epoch end.
  d.add_interval(24, true);
  EXPECT_FALSE(d.next_would_pass(false, at(t0, 80)));
  EXPECT_TRUE(d.next_would_pass(true, at(t0, 80)));
  // One slow step raises the estimate at once; it decays slowly afterwards.
  d.add_interval(10, false);
  EXPECT_TRUE(d.next_would_pass(false, at(t0, 85)));
  for (int i = 0; i < 50; ++i) d.add_interval(4, false);
  EXPECT_FALSE(d.next_would_pass(false, at(t0, 89.5)));
}
