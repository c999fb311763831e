// The parallel grid without MPI: the rank order and the groups of a shape,
// their names and the parsing back, the start-up lines, the bad shapes'
// messages, per-group collective numbers, and hang reports that name a
// group and only its members. (The communicators on real ranks:
// tests/mpi/test_dist_grid.cpp.)
#include <gtest/gtest.h>

#include "dist/grid.h"
#include "dist/group.h"
#include "dist/hang_report.h"
#include "dist/heartbeat.h"

using namespace hpc::dist;

namespace {

std::vector<PeerInfo> peers(int n) {
  std::vector<PeerInfo> p;
  p.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) p.push_back({r < 4 ? "n01" : "n02", 1000 + r});
  return p;
}

PeerState waiting_in(GroupKind g, uint64_t seq, CollOp op = CollOp::Allreduce) {
  PeerState s;
  s.answered = true;
  s.step = 4;
  s.started[static_cast<size_t>(g)] = seq;
  s.waiting_on = seq;
  s.waiting_group = g;
  s.waiting_op = op;
  s.state_s = 5.1;
  return s;
}

PeerState computing(GroupKind g, uint64_t last) {
  PeerState s;
  s.answered = true;
  s.step = 4;
  s.started[static_cast<size_t>(g)] = last;
  s.state_s = 6.0;
  return s;
}

}  // namespace

TEST(GridShape, RanksAreOrderedTpFastestThenPpThenDp) {
  const GridShape g{2, 3, 4};  // dp 2 × pp 3 × tp 4 = 24
  EXPECT_EQ(g.world(), 24);
  for (int r = 0; r < g.world(); ++r) {
    const GridCoord c = g.coord(r);
    EXPECT_EQ((c.dp * g.pp + c.pp) * g.tp + c.tp, r);
    EXPECT_EQ(g.rank_of(c), r);
  }
  EXPECT_EQ(g.members(GroupKind::Tp, 13), (std::vector<int>{12, 13, 14, 15}));  // adjacent
}

TEST(GridShape, GroupsOfEveryKind) {
  const GridShape g{2, 3, 4};
  // rank 13: dp 1, pp 0, tp 1
  EXPECT_EQ(g.members(GroupKind::Tp, 13), (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(g.members(GroupKind::Pp, 13), (std::vector<int>{13, 17, 21}));
  EXPECT_EQ(g.members(GroupKind::Dp, 13), (std::vector<int>{1, 13}));
  EXPECT_EQ(g.members(GroupKind::Embed, 13), (std::vector<int>{13, 21}));
  EXPECT_TRUE(g.members(GroupKind::Embed, 17).empty()) << "a middle stage holds no embedding";
  EXPECT_EQ(g.members(GroupKind::World, 13).size(), 24u);
  EXPECT_EQ(GridShape({4, 1, 1}).members(GroupKind::Embed, 2), (std::vector<int>{2})) << "pp 1: itself";
  // Every rank is in exactly one group of each kind, and the groups cover the world.
  for (GroupKind k : {GroupKind::Tp, GroupKind::Pp, GroupKind::Dp}) {
    std::vector<int> seen(24, 0);
    for (int r = 0; r < 24; ++r)
      for (int m : g.members(k, r)) seen[static_cast<size_t>(m)] += m == r;
    for (int c : seen) EXPECT_EQ(c, 1);
  }
}

TEST(GridShape, NamesAreKindAndRanksAndParseBack) {
  const GridShape g{2, 1, 2};
  EXPECT_EQ(g.group_name(GroupKind::Tp, 3), "tp[2,3]");
  EXPECT_EQ(g.group_name(GroupKind::Dp, 3), "dp[1,3]");
  EXPECT_EQ(GridShape({4, 1, 1}).group_name(GroupKind::Dp, 1), "world")
      << "the dp group that spans the world";
  EXPECT_EQ(GridShape({1, 1, 8}).group_name(GroupKind::Tp, 5), "tp[0-7]") << "not the world: its own";
  GroupKind kind = GroupKind::World;
  std::vector<int> ranks;
  ASSERT_TRUE(parse_group_name("tp[0-3,8,10-11]", kind, ranks));
  EXPECT_EQ(kind, GroupKind::Tp);
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  ASSERT_TRUE(parse_group_name("world", kind, ranks));
  EXPECT_EQ(kind, GroupKind::World);
  for (const char* bad : {"tp", "tp[]", "xx[0]", "tp[1-0]", "tp[0,,1]", "tp[a]", "dp[0"})
    EXPECT_FALSE(parse_group_name(bad, kind, ranks)) << bad;
  EXPECT_EQ(rank_list({0, 1, 2, 5, 7, 8, 9, 10}), "0-2,5,7-10");
}

TEST(Grid, ABadShapeIsOneLineSayingWhatDivides) {
  EXPECT_EQ(check_grid(4, 2, 1), "");
  EXPECT_EQ(check_grid(8, 2, 2), "");
  EXPECT_EQ(check_grid(4, 3, 1),
            "dist.tp 3 does not divide the world of 4 ranks: run a multiple of 3 ranks, or choose a dist.tp "
            "that divides 4");
  EXPECT_EQ(check_grid(6, 2, 2),
            "dist.tp 2 × dist.pp 2 = 4 does not divide the world of 6 ranks: run a multiple of 4 ranks, or "
            "choose dist.tp and dist.pp whose product divides 6");
  EXPECT_NE(check_grid(1, 2, 1).find("the world of 1 rank:"), std::string::npos);
}

TEST(Grid, StartUpLinesNameEachGroupsRanksAndNodes) {
  std::vector<std::string> hosts = {"n01", "n01", "n02", "n02"};
  std::vector<std::string> l = grid_lines(GridShape{2, 1, 2}, hosts);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].rfind("grid: dp 2 × pp 1 × tp 2 = 4 ranks", 0), 0u) << l[0];
  EXPECT_EQ(l[1], "  tp groups (split each layer): [0,1] on n01, [2,3] on n02");
  EXPECT_EQ(l[2], "  dp groups (average gradients): [0,2] on n01+n02, [1,3] on n01+n02");
  EXPECT_EQ(grid_lines(GridShape{4, 1, 1}, hosts).size(), 1u) << "pure data parallel: the grid line only";
  hosts.assign(64, "n");
  l = grid_lines(GridShape{32, 1, 2}, hosts);
  EXPECT_NE(l[1].find("… (32 groups)"), std::string::npos) << l[1];
}

TEST(Heartbeat, EachGroupNumbersItsOwnCollectives) {
  Heartbeat hb;
  EXPECT_EQ(hb.start(GroupKind::Tp), 1u);
  EXPECT_EQ(hb.start(GroupKind::Tp), 2u);
  EXPECT_EQ(hb.start(), 1u) << "the world's numbers are its own";
  EXPECT_EQ(hb.start(GroupKind::Dp), 1u);
  hb.wait_begin(2, CollOp::Allreduce, GroupKind::Tp);
  EXPECT_EQ(hb.waiting().group, GroupKind::Tp);
  EXPECT_EQ(hb.waiting().seq, 2u);
  hb.wait_begin(WaitPoint{3, CollOp::Recv, GroupKind::Pp, 5});
  EXPECT_EQ(hb.waiting_peer(), 5);
  EXPECT_EQ(hb.started(GroupKind::Tp), 2u);
  EXPECT_EQ(hb.started(GroupKind::World), 1u);
}

TEST(HangReport, AGroupsCollectiveNamesTheGroupAndOnlyItsMembers) {
  const GridShape shape{2, 1, 2};
  // Rank 1 stalled at step 4; rank 0 waits in tp[0,1] #7; ranks 2 and 3 wait in their dp groups.
  std::vector<PeerState> s = {waiting_in(GroupKind::Tp, 7), computing(GroupKind::Tp, 6),
                              waiting_in(GroupKind::Dp, 3), waiting_in(GroupKind::Dp, 3)};
  const GroupTag tp = GroupTag::of(shape, GroupKind::Tp, 0);
  HangReport r = describe_hang(0, tp, WaitPoint{7, CollOp::Allreduce, GroupKind::Tp, -1}, 4,
                               "did not complete within 5 s (dist.timeout)", peers(4), s, true, shape);
  EXPECT_EQ(r.reporter, 0);
  EXPECT_EQ(
      r.text,
      "collective #7 of tp[0,1] (allreduce at step 4) did not complete within 5 s (dist.timeout): rank 1 "
      "(host n01, pid 1001) is stuck at step 4: no collective for 6.0 s, the last was #6; rank 0 waits in "
      "#7 of tp[0,1]");
  // From the dp group's side, rank 0 is behind: it waits in another group's collective.
  const GroupTag dp = GroupTag::of(shape, GroupKind::Dp, 2);
  r = describe_hang(2, dp, WaitPoint{3, CollOp::Allreduce, GroupKind::Dp, -1}, 4,
                    "did not complete within 5 s (dist.timeout)", peers(4), s, true, shape);
  EXPECT_EQ(
      r.text,
      "collective #3 of dp[0,2] (allreduce at step 4) did not complete within 5 s (dist.timeout): rank 0 "
      "(host n01, pid 1000) waits in #7 of tp[0,1] (allreduce at step 4) for 5.1 s; rank 2 waits in #3 "
      "of dp[0,2]");
}

TEST(HangReport, AMessageNamesItsPeer) {
  const GridShape shape{1, 4, 1};
  std::vector<PeerState> s(4, computing(GroupKind::Pp, 0));
  s[2] = waiting_in(GroupKind::Pp, 5, CollOp::Recv);
  s[2].waiting_peer = 1;
  PeerState dead;
  s[1] = dead;
  s[1].proc = ProcState::Gone;
  const GroupTag pp = GroupTag::of(shape, GroupKind::Pp, 2);
  HangReport r = describe_hang(2, pp, WaitPoint{5, CollOp::Recv, GroupKind::Pp, 1}, 4,
                               "did not complete within 5 s (dist.timeout)", peers(4), s, true, shape);
  EXPECT_EQ(r.reporter, 2);
  EXPECT_EQ(
      r.text,
      "recv #5 from rank 1 of pp[0-3] (at step 4) did not complete within 5 s (dist.timeout): rank 1 (host "
      "n01, pid 1001) does not answer: its process is gone (killed or crashed)");
}
