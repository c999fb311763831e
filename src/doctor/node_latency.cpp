// The node latency probe (see node_latency.h).
//
// Point-to-point MPI on MPI_COMM_WORLD, polled against the deadline like
// the ring exchange, so a lost node is a PeerError and never a hang. Every
// iteration starts after a barrier of all ranks, so the first ranks of all
// nodes send at about the same moment; the stamp is taken right before the
// send, so the barrier's own skew does not enter the one-way time.
#include "doctor/node_latency.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/tensor.h"
#include "dist/mpi_comm.h"

namespace hpc::doctor {

namespace {

constexpr int WARMUP = 2;  // the first message may open the TCP connection
constexpr int TIMED = 9;
constexpr int MAX_PEERS = 8;
constexpr int TAG = 8;

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void wait_for(MPI_Request& req, std::chrono::steady_clock::time_point deadline, double timeout_s) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    mpiCheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(5));
    if ((spins & 255) == 0 && std::chrono::steady_clock::now() > deadline)
      throw PeerError("doctor node latency probe did not complete within " + std::to_string(int(timeout_s)) +
                      " s (dist.timeout): a peer node is dead or unreachable");
  }
}

// Every rank's `mine` values, rank-major, on every rank.
std::vector<double> allgather(dist::Communicator& comm, std::vector<double> mine) {
  Tensor send = Tensor::borrow(mine.data(), Shape{static_cast<int64_t>(mine.size())}, DType::F64);
  Tensor all(Shape{static_cast<int64_t>(mine.size()) * comm.size()}, DType::F64);
  comm.allgather(send, all);
  return std::vector<double>(all.data<double>(), all.data<double>() + all.count());
}

}  // namespace

std::vector<NodeLink> time_node_links(dist::Context& ctx, double timeout_s) {
  dist::Communicator& comm = ctx.host_comm();
  const dist::RankInfo& me = ctx.info();
  const int nodes = me.num_nodes, world = me.world;
  if (nodes < 2) return {};
  const std::vector<double> node_of = allgather(comm, {static_cast<double>(me.node)});
  std::vector<int> leader(static_cast<size_t>(nodes), -1);
  for (int r = world - 1; r >= 0; --r) leader[static_cast<size_t>(node_of[static_cast<size_t>(r)])] = r;
  const bool is_leader = leader[static_cast<size_t>(me.node)] == me.rank;
  const int rounds = std::min(nodes - 1, MAX_PEERS);

  std::vector<double> mine(static_cast<size_t>(rounds), 0.0);  // one-way time from the node at distance d
  for (int d = 1; d <= rounds; ++d) {
    std::vector<double> times;
    for (int i = 0; i < WARMUP + TIMED; ++i) {
      comm.barrier();
      if (!is_leader) continue;
      const int to = leader[static_cast<size_t>((me.node + d) % nodes)];
      const int from = leader[static_cast<size_t>((me.node - d + nodes) % nodes)];
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                 std::chrono::duration<double>(timeout_s));
      int64_t stamp_in = 0, stamp_out = 0;
      MPI_Request rreq, sreq;
      mpiCheck(MPI_Irecv(&stamp_in, 1, MPI_INT64_T, from, TAG, MPI_COMM_WORLD, &rreq));
      stamp_out = wall_ns();
      mpiCheck(MPI_Isend(&stamp_out, 1, MPI_INT64_T, to, TAG, MPI_COMM_WORLD, &sreq));
      wait_for(rreq, deadline, timeout_s);
      const double t = 1e-9 * static_cast<double>(wall_ns() - stamp_in);
      wait_for(sreq, deadline, timeout_s);
      if (i >= WARMUP) times.push_back(t);
    }
    // The minimum, as ping reports: a busy CPU or a late poll only ever adds
    // time, while the link's own latency is in every message.
    if (is_leader) mine[static_cast<size_t>(d - 1)] = *std::min_element(times.begin(), times.end());
  }
  const std::vector<double> all = allgather(comm, mine);
  std::vector<NodeLink> links;
  for (int n = 0; n < nodes; ++n)
    for (int d = 1; d <= rounds; ++d) {
      const int src = (n - d + nodes) % nodes;
      if (std::any_of(links.begin(), links.end(),
                      [&](const NodeLink& l) { return l.src == src && l.dst == n; }))
        continue;  // two nodes: distance 1 and distance −1 are the same peer
      links.push_back({src, n, all[static_cast<size_t>(leader[static_cast<size_t>(n)] * rounds + d - 1)]});
    }
  return links;
}

NodeSpot find_slow_node(const std::vector<NodeLink>& links, int num_nodes) {
  NodeSpot spot;
  std::map<std::pair<int, int>, double> t;
  for (const NodeLink& l : links) t[{l.src, l.dst}] = l.one_way;
  auto late = [&](int a, int b) {
    const double there = t.at({a, b}), back = t.at({b, a});
    return there - back > LATE_S && there > 3 * std::max(back, 0.0);
  };
  std::vector<std::pair<int, int>> bad;  // directions of slow pairs, and late directions
  std::vector<int> late_out(static_cast<size_t>(num_nodes), 0),
      measured_out(static_cast<size_t>(num_nodes), 0);
  std::set<std::pair<int, int>> slow_pairs;
  for (const auto& [dir, there] : t) {
    const auto [a, b] = dir;
    if (!t.count({b, a})) continue;
    ++measured_out[static_cast<size_t>(a)];
    const bool is_late = late(a, b);
    if (is_late) ++late_out[static_cast<size_t>(a)];
    if (is_late || there + t.at({b, a}) > SLOW_ROUND_TRIP_S) {
      bad.push_back(dir);
      slow_pairs.insert({std::min(a, b), std::max(a, b)});
    }
  }
  if (bad.empty()) return spot;
  spot.found = true;
  const auto worst = *std::max_element(bad.begin(), bad.end(), [&](auto x, auto y) { return t[x] < t[y]; });
  spot.src = worst.first, spot.dst = worst.second;
  spot.one_way = t[worst], spot.reverse = t[{worst.second, worst.first}];
  // The node whose every measured send is late, if exactly one.
  int named = 0;
  for (int n = 0; n < num_nodes; ++n)
    if (measured_out[static_cast<size_t>(n)] > 0 &&
        late_out[static_cast<size_t>(n)] == measured_out[static_cast<size_t>(n)])
      spot.node = n, ++named;
  if (named == 1) {
    // Name the late direction out of it, not a slower one elsewhere.
    for (const auto& dir : bad)
      if (dir.first == spot.node && (spot.src != spot.node || t[dir] > spot.one_way))
        spot.src = dir.first, spot.dst = dir.second, spot.one_way = t[dir],
        spot.reverse = t[{dir.second, dir.first}];
    return spot;
  }
  // Else, with three nodes or more, the one node in every slow pair (slow both ways: its port or cable).
  spot.node = -1;
  named = 0;
  int candidate = -1;
  for (int n = 0; n < num_nodes && slow_pairs.size() >= 2; ++n)
    if (std::all_of(slow_pairs.begin(), slow_pairs.end(),
                    [&](auto p) { return p.first == n || p.second == n; }))
      candidate = n, ++named;
  if (named == 1) spot.node = candidate;
  return spot;
}

}  // namespace hpc::doctor
