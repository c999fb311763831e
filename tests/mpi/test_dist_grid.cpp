// The parallel grid on real ranks (run with 2 and 4): dist::Grid's groups,
// their own collective numbers and names, and messages between ranks.
//
// Each group's communicator must reach exactly its members (a sum over it
// is the sum of their inputs, in rank order: the same bits as computed
// here), number its collectives apart from the other groups', and name its
// group in the flight record. Messages arrive in order, whole (also above
// the MPI count limit, in pieces), and a receive posted long before its
// send does not time out. Last, a receive whose peer never sends ends in a
// PeerError within dist.timeout that names the message, the peer and the
// group (the watchdog explains one timeout per process: this test is last).
#include <bit>
#include <cstdint>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/grid.h"
#include "dist/mpi_comm.h"
#include "harness.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::dist::GroupKind;
using hpc::dist::ReduceOp;

namespace {

hpc::dist::Context& ctx() { return mpitest::ctx(); }

// The sum over `members` of every member's input(r, i), in their order.
double ordered_sum(const std::vector<int>& members, int64_t i) {
  double acc = mpitest::input(members[0], i);
  for (size_t k = 1; k < members.size(); ++k) acc += mpitest::input(members[k], i);
  return acc;
}

// Every (tp, pp) the world can take.
std::vector<std::pair<int, int>> shapes(int world) {
  std::vector<std::pair<int, int>> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; tp * pp <= world; ++pp)
      if (world % (tp * pp) == 0) out.emplace_back(tp, pp);
  return out;
}

}  // namespace

TEST(Grid, EachGroupReachesExactlyItsMembersInRankOrder) {
  const int world = ctx().world(), me = ctx().rank();
  for (const auto& [tp, pp] : shapes(world)) {
    hpc::dist::Grid grid(ctx(), tp, pp);
    EXPECT_EQ(grid.dp() * grid.pp() * grid.tp(), world);
    EXPECT_EQ(grid.shape().rank_of(grid.coord()), me);
    for (GroupKind kind : {GroupKind::World, GroupKind::Dp, GroupKind::Tp, GroupKind::Pp, GroupKind::Embed}) {
      const std::vector<int> members = kind == GroupKind::World ? grid.shape().members(GroupKind::World, me)
                                                                : grid.shape().members(kind, me);
      if (members.empty()) {
        EXPECT_EQ(grid.host_embed(), nullptr);
        continue;
      }
      hpc::dist::Communicator& c = grid.host(kind);
      EXPECT_EQ(c.size(), static_cast<int>(members.size())) << "tp " << tp << " pp " << pp;
      EXPECT_EQ(members[static_cast<size_t>(c.rank())], me);
      EXPECT_EQ(c.group().ranks, members);
      Tensor t(Shape{257}, DType::F64);
      for (int64_t i = 0; i < t.count(); ++i) t.data<double>()[i] = mpitest::input(me, i);
      c.allreduce(t, ReduceOp::Sum);
      int64_t bad = 0;
      for (int64_t i = 0; i < t.count(); ++i) {
        const double want = ordered_sum(members, i);
        // Bitwise, by the values' bits (the group's rank-ordered sum).
        bad += std::bit_cast<uint64_t>(t.data<double>()[i]) != std::bit_cast<uint64_t>(want);
      }
      EXPECT_EQ(bad, 0) << hpc::dist::group_kind_name(kind) << " of tp " << tp << " pp " << pp;
    }
    ctx().host_comm().barrier();
  }
}

TEST(Grid, GroupsNumberTheirOwnCollectivesAndNameThemInTheFlightRecord) {
  const int world = ctx().world();
  if (world % 2 != 0) GTEST_SKIP() << "needs an even world";
  hpc::dist::Grid grid(ctx(), 2, 1);
  hpc::dist::Heartbeat& hb = ctx().heartbeat();
  const uint64_t tp0 = hb.started(GroupKind::Tp), world0 = hb.started(GroupKind::World);
  Tensor t(Shape{3}, DType::F32);
  for (int k = 0; k < 3; ++k) grid.host(GroupKind::Tp).allreduce(t, ReduceOp::Sum);
  grid.host(GroupKind::Tp).barrier();
  EXPECT_EQ(hb.started(GroupKind::Tp), tp0 + 4);
  EXPECT_EQ(hb.started(GroupKind::World), world0) << "a tp collective is not one of the world's";
  // The group is named by its ranks, in the record and in the hang reports.
  const std::string name = grid.shape().group_name(GroupKind::Tp, ctx().rank());
  EXPECT_EQ(grid.host(GroupKind::Tp).group().name, name);
  const std::string json = hb.flight().to_json("test");
  EXPECT_NE(json.find("\"group\": \"" + name + "\", \"op\": \"barrier\""), std::string::npos) << json;
  ctx().host_comm().barrier();
}

TEST(Grid, MessagesArriveInOrderWholeAndMayBePostedEarly) {
  const int world = ctx().world(), me = ctx().rank();
  hpc::dist::Grid grid(ctx(), 1, world);  // one pipeline of `world` stages
  hpc::dist::Communicator& pp = grid.host(GroupKind::Pp);
  auto* mpi = dynamic_cast<hpc::dist::MpiComm*>(&pp);
  ASSERT_NE(mpi, nullptr);
  mpi->set_max_message(1000);  // 2500 elements travel in three pieces
  const int next = (pp.rank() + 1) % pp.size(), prev = (pp.rank() + pp.size() - 1) % pp.size();
  // Two messages to the next stage; their receives posted first, long before the sends.
  Tensor in1(Shape{2500}, DType::F32), in2(Shape{7}, DType::F64);
  auto r1 = pp.recv_async(in1, prev);
  auto r2 = pp.recv_async(in2, prev);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Tensor out1(Shape{2500}, DType::F32), out2(Shape{7}, DType::F64);
  for (int64_t i = 0; i < 2500; ++i) out1.data<float>()[i] = static_cast<float>(mpitest::input(me, i));
  for (int64_t i = 0; i < 7; ++i) out2.data<double>()[i] = mpitest::input(me, 10000 + i);
  auto s = pp.message_group({{true, out1, next}, {true, out2, next}});
  r2->wait();  // in any order
  r1->wait();
  for (auto& q : s) q->wait();
  const int from = pp.group().ranks[static_cast<size_t>(prev)];
  int64_t bad = 0;
  for (int64_t i = 0; i < 2500; ++i)
    bad += in1.data<float>()[i] != static_cast<float>(mpitest::input(from, i));
  for (int64_t i = 0; i < 7; ++i) bad += in2.data<double>()[i] != mpitest::input(from, 10000 + i);
  EXPECT_EQ(bad, 0);
  // The record numbers messages per peer and direction: this rank's second receive from prev is #2.
  const std::string json = ctx().heartbeat().flight().to_json("test");
  EXPECT_NE(json.find("\"seq\": 2, \"group\": \"" + pp.group().name +
                      "\", \"op\": \"recv\", \"peer\": " + std::to_string(from)),
            std::string::npos)
      << json;
  mpi->set_max_message(INT_MAX);
  ctx().host_comm().barrier();
}

// Last: the watchdog explains one timeout per process.
TEST(Grid, AReceiveWhoseSendNeverComesIsAPeerErrorNamingThePeerAndTheGroup) {
  const int world = ctx().world();
  hpc::dist::Grid grid(ctx(), 1, world);
  hpc::dist::Communicator& pp = grid.host(GroupKind::Pp);
  dynamic_cast<hpc::dist::MpiComm&>(pp).set_timeout(2);
  if (pp.rank() == 1) {
    Tensor in(Shape{4}, DType::F32);
    const double t0 = hpc::dist::monotonic_seconds();
    try {
      pp.recv(in, 0);
      ADD_FAILURE() << "the receive completed";
    } catch (const hpc::PeerError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("recv #1 from rank 0 of " + pp.group().name), std::string::npos) << what;
      EXPECT_NE(what.find("did not complete within 2 s (dist.timeout)"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0 (host"), std::string::npos) << what;
    }
    EXPECT_LT(hpc::dist::monotonic_seconds() - t0, 2 + 5 + 5.0) << "timeout, the question round, the pause";
  }
  ctx().host_comm().barrier();
}

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
