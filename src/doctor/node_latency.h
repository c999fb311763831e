// The doctor's node latency probe: which node's network is slow, in a job
// of any number of nodes, two included.
//
// The ring exchange (preflight.h) finds a slow rank or node by comparing
// links with each other; with two nodes there is one link between nodes and
// nothing to compare it with. So the first rank of every node also sends an
// 8-byte message, stamped with its wall clock, to the first rank of other
// nodes, and the receiver subtracts the stamp from its own clock: a one-way
// time per direction. Their sum, the round trip, is exact whatever the clocks
// say (the offset cancels); their difference says which way is late, if the
// clocks agree (to well under a millisecond with NTP or PTP, exactly on one
// machine). A node whose sends are late (its port, cable, or a traffic
// shaper on its side) is named; a round trip above what any data-center
// network takes is a slow link even when no node can be blamed.
#pragma once

#include <vector>

#include "dist/context.h"

namespace hpc::doctor {

// One direction between two nodes' first ranks.
struct NodeLink {
  int src = 0, dst = 0;  // node indices
  double one_way = 0;    // seconds, least of 9: receiver's clock at arrival minus the sender's stamp
};

// A direction is late when it takes LATE_S longer than the way back and 3×
// as long (the clocks of two nodes agree to well under LATE_S / 2).
constexpr double LATE_S = 2e-3;
// A round trip of 8 bytes above this is slow on any data-center network
// (InfiniBand: a few µs; TCP over Ethernet: tens of µs).
constexpr double SLOW_ROUND_TRIP_S = 5e-3;

// Where the probe points.
struct NodeSpot {
  bool found = false;
  int node = -1;           // the node whose sends are late to every peer (-1: none named)
  int src = -1, dst = -1;  // the worst direction
  double one_way = 0;      // its time
  double reverse = 0;      // the way back
};

// Runs the probe: a collective call on every rank (ranks other than the
// first of a node only take part in the barriers); every rank returns all
// directions measured. Up to 8 peers per node (the nodes at distance 1…8 in
// node order) keep it short on large jobs. Throws PeerError after
// `timeout_s` without an answer.
std::vector<NodeLink> time_node_links(dist::Context& ctx, double timeout_s);

// The rule above; needs both directions of a pair to judge it.
NodeSpot find_slow_node(const std::vector<NodeLink>& links, int num_nodes);

}  // namespace hpc::doctor
