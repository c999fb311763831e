// The doctor's fabric preflight: a few seconds of traffic between all ranks
// before hours of allocation are spent on them.
//
// 1. An AllReduce sweep over the communicator training uses, at the
//    configured gradient bucket size (dist.bucket_mb) and sizes around it,
//    reported like nccl-tests: time, algbw = bytes / time and
//    busbw = algbw · 2(n−1)/n (the bandwidth each link needs for a ring
//    AllReduce, comparable with the hardware's link speed at any n), plus
//    the count of wrong elements in the result.
// 2. A ring exchange: every rank receives a bucket from its left and from
//    its right neighbour, timed at the receiver. An AllReduce runs at the
//    pace of its slowest member, so its per-rank times cannot show who that
//    is; per-link receive times can: a slow rank or node makes every link
//    that touches it slow and leaves the others alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/context.h"
#include "doctor/node_latency.h"

namespace hpc::doctor {

struct SweepRow {
  int64_t bytes = 0, count = 0;  // float32 elements
  double time_us = 0;            // slowest rank's mean over the timed iterations
  double algbw = 0, busbw = 0;   // GB/s (10^9 bytes per second)
  int64_t wrong = 0;             // elements that differed from the expected sum, all ranks together
};

// One directed link of the ring exchange, timed at its receiver.
struct LinkTime {
  int src = 0, dst = 0;
  double seconds = 0;  // least over the iterations
};

// One AllReduce sweep over one communicator.
struct Sweep {
  std::string communicator;  // mpi | nccl
  std::string buffers;       // host | gpu
  std::vector<SweepRow> rows;
  std::vector<double> rank_us;  // each rank's own mean time at the bucket size
};

struct Preflight {
  bool ran = false;
  std::string skipped;  // why not, when !ran
  int ranks = 0;
  int64_t bucket_bytes = 0;
  // MPI over host buffers always (CPU training, and the host side of every
  // job); then NCCL over GPU buffers when every rank trains on a GPU and
  // dist.backend allows NCCL: the communicator GPU training uses.
  std::vector<Sweep> sweeps;
  std::string gpu_skipped;  // why a GPU job got no NCCL sweep ("" otherwise)
  int64_t ring_bytes = 0;
  std::vector<LinkTime> links;  // 2 per rank: from the left and from the right neighbour
  int nodes = 1;
  std::vector<NodeLink> node_links;  // both directions between node pairs (node_latency.h), 2+ nodes
};

// Where the preflight points: a rank whose links are all slow, or one slow link.
struct SlowSpot {
  bool found = false;
  int rank = -1;           // the rank every slow link touches (-1: no single rank)
  int node = -1;           // else the node every slow link touches (-1: none)
  int src = -1, dst = -1;  // the slowest link
  double seconds = 0;      // the slowest link's time
  double typical = 0;      // the links' lower quartile: what a healthy link takes
};

// Message sizes of the sweep for a bucket of `bucket_bytes`: bucket/16,
// bucket/4, bucket, 2·bucket, each a multiple of 4 bytes and at least 4 KiB.
std::vector<int64_t> sweep_sizes(int64_t bucket_bytes);

// nccl-tests' bus bandwidth of an AllReduce over `ranks` ranks.
double bus_bandwidth(double algbw, int ranks);

// Runs the preflight; a collective call on every rank, same result on all.
// `gpu` is the CUDA device this rank would train on (-1: none). Throws
// PeerError when a peer does not answer within cfg.dist.timeout.
Preflight run_preflight(dist::Context& ctx, const Config& cfg, int gpu);

// A link is slow when it took over 3× the typical link (the lower quartile
// of all) and at least 1 ms more (below that, scheduling noise). Needs 3 or
// more ranks: with two, every link touches both.
// node_of[r] is rank r's node; with it, several slow ranks of one node name
// the node, and links inside a node and links between nodes each have their
// own typical time (shared memory or NVLink against the network: a healthy
// network link is not an outlier for being slower than shared memory).
SlowSpot find_slow_spot(const std::vector<LinkTime>& links, int world, const std::vector<int>& node_of = {});

}  // namespace hpc::doctor
