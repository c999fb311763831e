// `hpctrain doctor --flight`'s analysis (doctor/flight.h) on planted records:
// a world-only run keeps its report; with groups, each group is analysed
// among its members, the culprit is the rank behind that waits in nothing,
// and an unmatched message names the peer that never sent.
#include <gtest/gtest.h>

#include "doctor/flight.h"

using hpc::doctor::FlightFile;
using hpc::doctor::FlightOp;
using hpc::doctor::FlightVerdict;

namespace {

FlightOp op(uint64_t seq, const std::string& group, const std::string& state,
            const std::string& what = "allreduce", int peer = -1) {
  FlightOp o;
  o.seq = seq;
  o.group = group;
  o.op = what;
  o.dtype = "float32";
  o.state = state;
  o.count = 8;
  o.step = 4;
  o.peer = peer;
  return o;
}

FlightFile file(int rank, std::vector<FlightOp> ops) {
  FlightFile f;
  f.rank = rank;
  f.host = "n01";
  f.ops = std::move(ops);
  return f;
}

bool has_line(const FlightVerdict& v, const std::string& line) {
  for (const std::string& l : v.lines)
    if (l == line) return true;
  return false;
}

std::string all(const FlightVerdict& v) {
  std::string s;
  for (const std::string& l : v.lines) s += l + "\n";
  return s;
}

}  // namespace

TEST(FlightAnalysis, WorldOnlyReportIsUnchanged) {
  std::vector<FlightFile> f = {file(0, {op(1, "world", "completed"), op(2, "world", "started")}),
                               file(1, {op(1, "world", "completed")}),
                               file(2, {op(1, "world", "completed"), op(2, "world", "started")})};
  FlightVerdict v = hpc::doctor::analyse_flight(f, 3);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.seq, 2u);
  EXPECT_EQ(v.behind, std::vector<int>{1});
  EXPECT_TRUE(has_line(v,
                       "diverging collective: #2 (allreduce of 8 float32 at step 4): rank(s) 0,2 wait in it; "
                       "rank(s) 1 never started it"))
      << all(v);
  EXPECT_TRUE(
      has_line(v,
               "  rank 1 (n01): last completed #1 (allreduce of 8 float32 at step 4): BEHIND (stuck in "
               "computation before #2, or stopped)"))
      << all(v);
}

TEST(FlightAnalysis, EachGroupAmongItsMembersAndTheCulpritWaitsInNothing) {
  // dp 2 × tp 2: rank 1 stalled; rank 0 waits in tp[0,1] #3; rank 2 waits for rank 0 in dp[0,2] #1,
  // rank 3 for rank 1 in dp[1,3] #1. The other tp group, tp[2,3], completed all its collectives.
  std::vector<FlightFile> f = {
      file(0, {op(1, "world", "completed"), op(2, "tp[0,1]", "completed"), op(3, "tp[0,1]", "started")}),
      file(1, {op(1, "world", "completed"), op(2, "tp[0,1]", "completed")}),
      file(2, {op(1, "world", "completed"), op(3, "tp[2,3]", "completed"), op(1, "dp[0,2]", "started")}),
      file(3, {op(1, "world", "completed"), op(3, "tp[2,3]", "completed"), op(1, "dp[1,3]", "started")})};
  FlightVerdict v = hpc::doctor::analyse_flight(f, 4);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.culprits, std::vector<int>{1}) << all(v);
  EXPECT_TRUE(
      has_line(v,
               "diverging collective: #3 of tp[0,1] (allreduce of 8 float32 at step 4): rank(s) 0 wait "
               "in it; rank(s) 1 never started it"))
      << all(v);
  EXPECT_TRUE(
      has_line(v,
               "diverging collective: #1 of dp[1,3] (allreduce of 8 float32 at step 4): rank(s) 3 wait "
               "in it; rank(s) 1 never started it"))
      << all(v);
  EXPECT_EQ(all(v).find("tp[2,3]"), all(v).find("tp[2,3] (")) << "tp[2,3] did not diverge";
  EXPECT_NE(all(v).find("problem: rank(s) 1 fell behind at collective #1 of dp[1,3]"), std::string::npos)
      << all(v);
}

TEST(FlightAnalysis, AReceiveWhosePeerNeverSentNamesThePeer) {
  std::vector<FlightFile> f = {
      file(0, {op(1, "pp[0,1]", "completed", "send", 1)}),
      file(1, {op(1, "pp[0,1]", "completed", "recv", 0), op(2, "pp[0,1]", "started", "recv", 0)})};
  FlightVerdict v = hpc::doctor::analyse_flight(f, 2);
  EXPECT_TRUE(v.diverged);
  EXPECT_TRUE(
      has_line(v,
               "waiting message: rank 1 in recv #2 from rank 0 of pp[0,1] (recv from rank 0 of 8 float32 "
               "at step 4): rank 0 never started its send"))
      << all(v);
  EXPECT_EQ(v.culprits, std::vector<int>{0});
}

TEST(FlightAnalysis, ParsesTheGroupAndThePeer) {
  const std::string text =
      "{\"format\": \"hpctrain-flight-1\", \"rank\": 1, \"host\": \"n01\", \"pid\": 5, \"reason\": \"x\", "
      "\"dumped_unix\": 1, \"dumped_monotonic_s\": 1, \"recorded\": 2, \"entries\": [\n"
      "  {\"seq\": 3, \"group\": \"tp[0,1]\", \"op\": \"allreduce\", \"count\": 8, \"dtype\": \"float32\", "
      "\"comm\": "
      "\"mpi\", \"step\": 4, \"enqueue_s\": 1, \"start_s\": 1, \"end_s\": 0, \"state\": \"started\"},\n"
      "  {\"seq\": 2, \"group\": \"pp[0,1]\", \"op\": \"recv\", \"peer\": 0, \"count\": 8, \"dtype\": "
      "\"float32\", "
      "\"comm\": \"mpi\", \"step\": 4, \"enqueue_s\": 1, \"start_s\": 1, \"end_s\": 0, \"state\": "
      "\"started\"}\n]}\n";
  FlightFile f = hpc::doctor::parse_flight(text, "flight-1.json");
  ASSERT_EQ(f.ops.size(), 2u);
  EXPECT_EQ(f.ops[0].group, "tp[0,1]");
  EXPECT_EQ(f.ops[1].op, "recv");
  EXPECT_EQ(f.ops[1].peer, 0);
}
