// The pipeline schedules (train/pipeline_schedule.h) run against each other
// on the fake clock of train/pipeline_sim.h: no deadlock, every message
// matched, each micro-batch's forward and backward once per chunk, the peak
// in-flight activations and the bubble of the theory.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/pipeline_schedule.h"
#include "train/pipeline_sim.h"

using hpc::UserError;
using namespace hpc::train;

namespace {

std::vector<std::vector<PipeAction>> all_stages(int p, int m, int v) {
  std::vector<std::vector<PipeAction>> lists;
  lists.reserve(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r)
    lists.push_back(v == 1 ? schedule_1f1b(p, r, m) : schedule_interleaved(p, r, m, v));
  return lists;
}

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

struct Shape {
  int p, m, v;
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int p : {2, 3, 4})
    for (int m : {p, 2 * p, 8})
      for (int v : {1, 2})
        if (v == 1 || m % p == 0) out.push_back({p, m, v});
  return out;
}

}  // namespace

TEST(PipelineSchedule, FirstStageOf1F1BWithTwoStages) {
  // P = 2, M = 3, stage 0: one warm-up forward, then F B pairs, then the last B.
  std::vector<std::string> got;
  for (const PipeAction& a : schedule_1f1b(2, 0, 3)) got.push_back(to_string(a));
  const std::vector<std::string> want = {"F m0 c0",
                                         "send-act m0 c0 -> 1",
                                         "F m1 c0",
                                         "send-act m1 c0 -> 1",
                                         "recv-grad m0 c0 <- 1",
                                         "B m0 c0",
                                         "F m2 c0",
                                         "send-act m2 c0 -> 1",
                                         "recv-grad m1 c0 <- 1",
                                         "B m1 c0",
                                         "recv-grad m2 c0 <- 1",
                                         "B m2 c0"};
  EXPECT_EQ(got, want);
}

TEST(PipelineSchedule, LastStageOf1F1BHasNoActivationSendNorGradReceive) {
  for (const PipeAction& a : schedule_1f1b(3, 2, 5)) {
    EXPECT_NE(a.op, PipeOp::SendActivation);
    EXPECT_NE(a.op, PipeOp::RecvGrad);
  }
  for (const PipeAction& a : schedule_1f1b(3, 0, 5)) {
    EXPECT_NE(a.op, PipeOp::RecvActivation);
    EXPECT_NE(a.op, PipeOp::SendGrad);
  }
}

TEST(PipelineSchedule, AllShapesRunWithoutDeadlockAndMatchEveryMessage) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE("P=" + std::to_string(s.p) + " M=" + std::to_string(s.m) + " V=" + std::to_string(s.v));
    const SimResult r = simulate_pipeline(all_stages(s.p, s.m, s.v), s.m, s.v);
    EXPECT_EQ(r.error, "");
  }
}

TEST(PipelineSchedule, PeakInFlightIsTheTheory) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE("P=" + std::to_string(s.p) + " M=" + std::to_string(s.m) + " V=" + std::to_string(s.v));
    for (int r = 0; r < s.p; ++r) {
      const auto list = s.v == 1 ? schedule_1f1b(s.p, r, s.m) : schedule_interleaved(s.p, r, s.m, s.v);
      // 1F1B: P − r (the warm-up plus the steady state's one), at most M.
      // Interleaved: Megatron-LM's warm-up 2(P − r − 1) + (V − 1)P plus one,
      // at most M·V chunk activations (all of them when M = P).
      const int want = s.v == 1     ? std::min(s.p - r, s.m)
                       : s.m == s.p ? s.m * s.v
                                    : std::min(2 * (s.p - r - 1) + (s.v - 1) * s.p + 1, s.m * s.v);
      EXPECT_EQ(peak_in_flight(list), want) << "stage " << r;
    }
  }
}

TEST(PipelineSchedule, BubbleOf1F1BIsExactlyTheTheory) {
  // Forward 1, backward 2: makespan 3(M + P − 1), each stage idle 3(P − 1),
  // so the bubble fraction is (P − 1)/(M + P − 1) exactly.
  for (const Shape& s : shapes()) {
    if (s.v != 1) continue;
    SCOPED_TRACE("P=" + std::to_string(s.p) + " M=" + std::to_string(s.m));
    const SimResult r = simulate_pipeline(all_stages(s.p, s.m, 1), s.m, 1);
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.makespan, 3L * (s.m + s.p - 1));
    for (int st = 0; st < s.p; ++st) {
      EXPECT_EQ(r.busy[st], 3L * s.m);
      EXPECT_EQ(r.idle[st], 3L * (s.p - 1));  // idle / makespan = (P − 1)/(M + P − 1)
    }
  }
}

TEST(PipelineSchedule, InterleavedBubbleIsTheTheory) {
  // Each chunk's forward costs 1 and backward 2 (a stage's work is 3·V per
  // micro-batch): the theory's bubble is 3(P − 1), the fraction
  // (P − 1)/(V·M + P − 1), V times smaller than 1F1B's at equal work.
  for (const Shape& s : shapes()) {
    if (s.v == 1) continue;
    SCOPED_TRACE("P=" + std::to_string(s.p) + " M=" + std::to_string(s.m));
    const SimResult r = simulate_pipeline(all_stages(s.p, s.m, s.v), s.m, s.v);
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.makespan, 3L * (s.v * s.m + s.p - 1));
    for (int st = 0; st < s.p; ++st) EXPECT_EQ(r.idle[st], 3L * (s.p - 1));
  }
}

TEST(PipelineSimulator, CatchesADeadlockAndAMismatch) {
  auto lists = all_stages(2, 2, 1);
  // Stage 0 waits for a gradient before it sent the forward that leads to it.
  lists[0].insert(lists[0].begin(), PipeAction{PipeOp::RecvGrad, 0, 0, 1});
  EXPECT_NE(simulate_pipeline(lists, 2, 1).error.find("deadlock"), std::string::npos);

  auto swapped = all_stages(2, 2, 1);
  // Stage 1 receives micro-batch 1 where micro-batch 0 comes first.
  for (PipeAction& a : swapped[1])
    if (a.op == PipeOp::RecvActivation || a.op == PipeOp::Forward || a.op == PipeOp::Backward ||
        a.op == PipeOp::SendGrad)
      a.micro = 1 - a.micro;
  EXPECT_NE(simulate_pipeline(swapped, 2, 1).error.find("the next message"), std::string::npos);

  auto doubled = all_stages(2, 2, 1);
  doubled[0].push_back({PipeOp::Forward, 0, 0, -1});
  EXPECT_NE(simulate_pipeline(doubled, 2, 1).error.find("forward 2"), std::string::npos);
}

TEST(PipelineSchedule, BadInputIsOneLineUserError) {
  EXPECT_EQ(user_error([] { schedule_1f1b(4, 0, 3); }),
            "train.micro_batches = 3 is fewer than dist.pp = 4 pipeline stages (need M >= P)");
  EXPECT_EQ(user_error([] { schedule_interleaved(4, 0, 2, 2); }),
            "train.micro_batches = 2 is fewer than dist.pp = 4 pipeline stages (need M >= P)");
  EXPECT_EQ(user_error([] { schedule_interleaved(4, 1, 6, 2); }),
            "train.micro_batches = 6 is not a multiple of dist.pp = 4 (the interleaved schedule runs "
            "micro-batches in groups of P)");
  EXPECT_EQ(user_error([] { schedule_interleaved(2, 0, 4, 0); }),
            "dist.pp_virtual must be at least 1, got 0");
}
