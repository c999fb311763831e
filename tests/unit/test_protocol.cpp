// The messages ranks exchange around a step (train/protocol.h): every message
// round-trips through its wire layout with a distinct value in every field
// (a field left out of fields(), or two swapped, fails), counts and steps up
// to 2^53 stay exact, and the collectives on messages move them as named
// fields between three ranks (threads): summed, broadcast, gathered by rank.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "fake_comm.h"
#include "train/protocol.h"

namespace hpc::train {
namespace {

template <class M>
M round_trip(const M& m) {
  const Wire<M> w = pack(m);
  return unpack<M>(w.data());
}

TEST(Protocol, StopVoteRoundTrips) {
  StopVote v;
  v.usr1_ranks = 1, v.usr1_rank_sum = 2, v.term_ranks = 3, v.term_rank_sum = 4, v.deadline_ranks = 5;
  v.minutes_due_ranks = 6, v.write_failure = 74, v.save_seconds = 0.125;
  EXPECT_EQ(wire_size<StopVote>, 8u);
  EXPECT_EQ(round_trip(v), v);
  const Wire<StopVote> w = pack(v);
  EXPECT_EQ(std::vector<double>(w.begin(), w.end()), (std::vector<double>{1, 2, 3, 4, 5, 6, 74, 0.125}));
}

TEST(Protocol, SaveOutcomeAndWriteSettlementRoundTrip) {
  SaveOutcome o;
  o.saved = 0, o.seconds = 2.5, o.exit_code = 74;
  EXPECT_EQ(round_trip(o), o);
  WriteSettlement s;
  s.exit_code = 74, s.failed_step = 123456789012345;  // a step far past any float's exactness
  EXPECT_EQ(round_trip(s), s);
  EXPECT_EQ(WriteSettlement().failed_step, -1);  // none failed
}

TEST(Protocol, LogWindowAndModelFingerprintRoundTrip) {
  LogWindowSums l;
  l.loss_sum = 1.5, l.count = 64, l.correct = 31, l.steps = 7, l.step = 9007199254740991;  // 2^53 - 1
  EXPECT_EQ(round_trip(l), l);
  ModelFingerprint f;
  f.params = 670000, f.spec_hash = (int64_t(1) << 52) - 3;
  EXPECT_EQ(round_trip(f), f);
}

TEST(Protocol, EvalBatchSumsRoundTripAsTableRows) {
  std::vector<double> table(3 * wire_size<EvalBatchSums>, -1);
  for (int b = 0; b < 3; ++b)
    pack_into(EvalBatchSums{10.5 * b, 64.0 + b, 60.0 - b, 63.0}, table.data() + b * wire_size<EvalBatchSums>);
  for (int b = 0; b < 3; ++b)
    EXPECT_EQ(unpack<EvalBatchSums>(table.data() + b * wire_size<EvalBatchSums>),
              (EvalBatchSums{10.5 * b, 64.0 + b, 60.0 - b, 63.0}));
}

TEST(Protocol, ResumeHeadRoundTrips) {
  ResumeHead h;
  h.found = 1, h.step = 2, h.optimizer_steps = 3, h.has_loss_scaling = 1, h.loss_scale = 32768;
  h.good_steps = 5, h.skipped_steps = 6, h.consecutive_skips = 7;
  EXPECT_EQ(round_trip(h), h);
  EXPECT_EQ(wire_size<ResumeHead>, 8u);
}

// Three ranks as threads of one FakeComm group: what each collective leaves on each rank.
TEST(Protocol, CollectivesMoveNamedFields) {
  constexpr int WORLD = 3;
  test::FakeComm::Group group(WORLD);
  std::vector<StopVote> summed(WORLD);
  std::vector<ResumeHead> heads(WORLD);
  std::vector<std::vector<LogWindowSums>> gathered(WORLD), rows(WORLD);
  std::vector<std::thread> ranks;
  ranks.reserve(WORLD);
  for (int r = 0; r < WORLD; ++r)
    ranks.emplace_back([&, r] {
      test::FakeComm comm(r, WORLD, &group);
      StopVote v;  // SIGUSR1 on ranks 1 and 2; rank 0 reports a write's seconds
      v.usr1_ranks = r > 0 ? 1 : 0;
      v.usr1_rank_sum = r > 0 ? r : 0;
      v.save_seconds = r == 0 ? 1.25 : 0;
      summed[size_t(r)] = sum_over_ranks(comm, v);

      ResumeHead h;  // rank 0 read a checkpoint; the others know nothing yet
      if (r == 0) h.found = 1, h.step = 40, h.optimizer_steps = 40;
      broadcast(comm, h, 0);
      heads[size_t(r)] = h;

      LogWindowSums w;
      w.loss_sum = 10.0 * r, w.count = r, w.steps = 2, w.step = 40;
      gathered[size_t(r)] = gather_from_ranks(comm, w);

      std::vector<LogWindowSums> mine;  // rank 0's rows, one per rank, to every rank
      if (r == 0)
        for (int q = 0; q < WORLD; ++q) mine.push_back(LogWindowSums{1.0 * q, 2.0 * q, 0, q, 0});
      broadcast_rows(comm, mine, 0);
      rows[size_t(r)] = mine;
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < WORLD; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(summed[size_t(r)].usr1_ranks, 2);
    EXPECT_EQ(summed[size_t(r)].usr1_rank_sum, 3);
    EXPECT_EQ(summed[size_t(r)].term_ranks, 0);
    EXPECT_EQ(summed[size_t(r)].save_seconds, 1.25);
    EXPECT_EQ(heads[size_t(r)].found, 1);
    EXPECT_EQ(heads[size_t(r)].step, 40);
    ASSERT_EQ(gathered[size_t(r)].size(), size_t(WORLD));
    ASSERT_EQ(rows[size_t(r)].size(), size_t(WORLD));
    for (int q = 0; q < WORLD; ++q) {
      EXPECT_EQ(gathered[size_t(r)][size_t(q)].loss_sum, 10.0 * q);
      EXPECT_EQ(gathered[size_t(r)][size_t(q)].step, 40);
      EXPECT_EQ(rows[size_t(r)][size_t(q)], (LogWindowSums{1.0 * q, 2.0 * q, 0, q, 0}));
    }
  }
}

}  // namespace
}  // namespace hpc::train
