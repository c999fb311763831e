// The fabric preflight (see preflight.h).
//
// The host sweep goes through Context::host_comm() (MPI), the GPU sweep
// through a fresh Context::make_nccl_comm(): the communicators training
// uses, with the deadline of dist.timeout. Every timed iteration starts
// after a host barrier and ends when the device is idle again, so a GPU
// time is the collective's, not the time to enqueue it. The ring exchange
// needs point-to-point messages, which the Communicator interface does not
// offer, so it calls MPI directly on MPI_COMM_WORLD, polling with the same
// deadline: a stuck peer is a PeerError, never a hang.
#include "doctor/preflight.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/tensor.h"
#include "dist/mpi_comm.h"

namespace hpc::doctor {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int WARMUP = 1;  // the warm-up iteration also checks the result
constexpr int TIMED = 5;
constexpr int64_t MAX_BYTES = int64_t(1) << 30;  // MPI counts are int; a bucket is never this big

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void wait_until_done(MPI_Request& req, Clock::time_point deadline, double timeout_s) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    mpiCheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    if ((spins & 255) == 0 && Clock::now() > deadline)
      throw PeerError("doctor ring exchange did not complete within " + std::to_string(int(timeout_s)) +
                      " s (dist.timeout): a peer rank is dead or stuck");
  }
}

// Mean time of TIMED AllReduces of `bytes` on this rank, in buffers on
// `device`; also counts wrong elements of the warm-up result (every rank
// contributes rank + 1, so each element must be n(n+1)/2, exact in float32
// for any realistic n). `host` provides the barriers.
double time_allreduce(dist::Communicator& comm, dist::Communicator& host, Device device, int64_t bytes,
                      int64_t* wrong) {
  const int64_t count = bytes / 4;
  Tensor buf(Shape{count}, DType::F32, device);
  const int n = comm.size();
  backend::fill(buf, comm.rank() + 1);
  for (int i = 0; i < WARMUP; ++i) comm.allreduce(buf, dist::ReduceOp::Sum);
  Tensor result = buf;
  if (device != Device::CPU) {
    result = Tensor(Shape{count}, DType::F32);
    backend::copy(buf, result);
  }
  const float expected = static_cast<float>(n) * static_cast<float>(n + 1) / 2;
  const float* p = result.data<float>();
  *wrong = std::count_if(p, p + count, [&](float v) { return v != expected; });
  double total = 0;
  for (int i = 0; i < TIMED; ++i) {
    host.barrier();
    auto t0 = Clock::now();
    comm.allreduce(buf, dist::ReduceOp::Sum);
    if (device != Device::CPU) backend::device_synchronize();
    total += seconds_since(t0);
  }
  return total / TIMED;
}

// Least receive time of `bytes` from the neighbour at distance `dir` (+1: from the left).
double time_ring(dist::Communicator& comm, int64_t bytes, int dir, double timeout_s) {
  const int n = comm.size(), r = comm.rank();
  const int from = ((r - dir) % n + n) % n, to = ((r + dir) % n + n) % n;
  std::vector<char> send(static_cast<size_t>(bytes), 1), recv(static_cast<size_t>(bytes));
  std::vector<double> times;
  for (int i = 0; i < WARMUP + TIMED; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    const auto deadline =
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    MPI_Request rreq, sreq;
    mpiCheck(MPI_Irecv(recv.data(), static_cast<int>(bytes), MPI_BYTE, from, 7, MPI_COMM_WORLD, &rreq));
    fault_at(FaultPoint::RingSend);  // test-only: sleep=MS@ring_send:R plants a slow rank
    mpiCheck(MPI_Isend(send.data(), static_cast<int>(bytes), MPI_BYTE, to, 7, MPI_COMM_WORLD, &sreq));
    wait_until_done(rreq, deadline, timeout_s);
    const double t = seconds_since(t0);
    wait_until_done(sreq, deadline, timeout_s);
    if (i >= WARMUP) times.push_back(t);
  }
  // The least, not the median: a rank that lost its CPU for a moment (an
  // oversubscribed node) slows some iterations, a slow link slows all.
  return *std::min_element(times.begin(), times.end());
}

// Every rank's `mine` values, rank-major, on every rank.
std::vector<double> allgather(dist::Communicator& comm, std::vector<double> mine) {
  Tensor send = Tensor::borrow(mine.data(), Shape{static_cast<int64_t>(mine.size())}, DType::F64);
  Tensor all(Shape{static_cast<int64_t>(mine.size()) * comm.size()}, DType::F64);
  comm.allgather(send, all);
  return std::vector<double>(all.data<double>(), all.data<double>() + all.count());
}

}  // namespace

std::vector<int64_t> sweep_sizes(int64_t bucket_bytes) {
  std::vector<int64_t> sizes;
  for (double f : {1.0 / 16, 1.0 / 4, 1.0, 2.0}) {
    int64_t b = std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(bucket_bytes) * f) / 4 * 4, 4096,
                                    MAX_BYTES);
    if (sizes.empty() || sizes.back() != b) sizes.push_back(b);
  }
  return sizes;
}

double bus_bandwidth(double algbw, int ranks) { return ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : 0.0; }

namespace {

Sweep sweep(dist::Communicator& comm, dist::Communicator& host, Device device, int64_t bucket_bytes) {
  Sweep sw;
  sw.communicator = comm.name();
  sw.buffers = device == Device::CPU ? "host" : "gpu";
  const std::vector<int64_t> sizes = sweep_sizes(bucket_bytes);
  std::vector<double> mine_us, wrong;
  for (int64_t bytes : sizes) {
    int64_t w = 0;
    mine_us.push_back(1e6 * time_allreduce(comm, host, device, bytes, &w));
    wrong.push_back(static_cast<double>(w));
  }
  const std::vector<double> all_us = allgather(host, mine_us), all_wrong = allgather(host, wrong);
  const size_t k = sizes.size();
  const int n = host.size();
  const int64_t at_bucket = std::max<int64_t>(bucket_bytes, 4096);  // the sweep's smallest size is 4 KiB
  for (size_t i = 0; i < k; ++i) {
    SweepRow row;
    row.bytes = sizes[i];
    row.count = sizes[i] / 4;
    for (int r = 0; r < n; ++r) {
      row.time_us = std::max(row.time_us, all_us[r * k + i]);
      row.wrong += static_cast<int64_t>(all_wrong[r * k + i]);
      if (sizes[i] == at_bucket) sw.rank_us.push_back(all_us[r * k + i]);
    }
    row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;  // GB/s
    row.busbw = bus_bandwidth(row.algbw, n);
    sw.rows.push_back(row);
  }
  return sw;
}

// The NCCL sweep when every rank trains on a GPU and dist.backend allows
// NCCL; otherwise the reason ("" when a GPU sweep does not apply at all).
std::string gpu_sweep(dist::Context& ctx, const Config& cfg, int gpu, Preflight& pf) {
  dist::Communicator& host = ctx.host_comm();
  double mine = gpu >= 0 ? 1 : 0;
  Tensor flag = Tensor::borrow(&mine, Shape{1}, DType::F64);
  host.allreduce(flag, dist::ReduceOp::Sum);  // every rank learns how many ranks have a GPU
  const int with_gpu = static_cast<int>(mine);
  if (with_gpu == 0) return "";
  if (with_gpu < pf.ranks) return "not every rank has a GPU";
  if (cfg.dist.backend == CommBackend::Mpi) return "--dist.backend mpi";
  try {
    backend::cuda_set_device(gpu);
    std::unique_ptr<dist::Communicator> nccl = ctx.make_nccl_comm();
    pf.sweeps.push_back(sweep(*nccl, host, Device::CUDA, pf.bucket_bytes));
  } catch (const UserError& e) {  // the same on every rank: NCCL refuses shared GPUs on all of them
    return e.what();
  }
  return "";
}

}  // namespace

Preflight run_preflight(dist::Context& ctx, const Config& cfg, int gpu) {
  Preflight pf;
  dist::Communicator& host = ctx.host_comm();
  pf.ranks = host.size();
  pf.bucket_bytes =
      std::clamp<int64_t>(static_cast<int64_t>(cfg.dist.bucket_mb * 1048576.0) / 4 * 4, 4, MAX_BYTES);
  if (pf.ranks < 2) {
    pf.skipped = "1 rank: no fabric to test";
    return pf;
  }
  pf.ran = true;
  pf.sweeps.push_back(sweep(host, host, Device::CPU, pf.bucket_bytes));
  pf.gpu_skipped = gpu_sweep(ctx, cfg, gpu, pf);

  pf.ring_bytes = pf.bucket_bytes;
  std::vector<double> mine = {time_ring(host, pf.ring_bytes, +1, cfg.dist.timeout),
                              time_ring(host, pf.ring_bytes, -1, cfg.dist.timeout)};
  std::vector<double> all = allgather(host, mine);
  for (int r = 0; r < pf.ranks; ++r) {
    const size_t at = 2 * static_cast<size_t>(r);
    pf.links.push_back({(r - 1 + pf.ranks) % pf.ranks, r, all[at]});
    pf.links.push_back({(r + 1) % pf.ranks, r, all[at + 1]});
  }
  pf.nodes = ctx.info().num_nodes;
  pf.node_links = time_node_links(ctx, cfg.dist.timeout);
  return pf;
}

SlowSpot find_slow_spot(const std::vector<LinkTime>& links, int world, const std::vector<int>& node_of) {
  SlowSpot spot;
  if (world < 3 || links.empty()) return spot;
  // The baseline is the lower quartile, not the median: a slow rank slows
  // the 4 links that touch it, which in a 3-rank ring is 4 of 6. One
  // baseline for links inside a node (kind 0), one for links between nodes.
  const bool by_node = node_of.size() == static_cast<size_t>(world);
  auto kind = [&](const LinkTime& l) {
    return by_node && node_of[static_cast<size_t>(l.src)] != node_of[static_cast<size_t>(l.dst)] ? 1 : 0;
  };
  double typical[2] = {0, 0};
  for (int k : {0, 1}) {
    std::vector<double> t;
    for (const LinkTime& l : links)
      if (kind(l) == k) t.push_back(l.seconds);
    std::sort(t.begin(), t.end());
    if (!t.empty()) typical[k] = t[(t.size() - 1) / 4];
  }
  std::vector<LinkTime> slow;
  for (const LinkTime& l : links) {
    const double base = typical[kind(l)];
    if (l.seconds > 3 * base && l.seconds - base > 1e-3) slow.push_back(l);
  }
  if (slow.empty()) return spot;
  spot.found = true;
  const LinkTime& worst = *std::max_element(
      slow.begin(), slow.end(), [](const LinkTime& a, const LinkTime& b) { return a.seconds < b.seconds; });
  spot.src = worst.src, spot.dst = worst.dst, spot.seconds = worst.seconds;
  spot.typical = typical[kind(worst)];
  // A single rank behind every slow link (two or more of them) is the culprit.
  std::vector<int> touches(static_cast<size_t>(world), 0);
  for (const LinkTime& l : slow) {
    ++touches[static_cast<size_t>(l.src)];
    if (l.dst != l.src) ++touches[static_cast<size_t>(l.dst)];
  }
  int culprits = 0;
  for (int r = 0; r < world; ++r)
    if (slow.size() >= 2 && touches[static_cast<size_t>(r)] == static_cast<int>(slow.size()))
      spot.rank = r, ++culprits;
  if (culprits != 1) spot.rank = -1;
  // Else one node behind every slow link (a node's network port, not one process).
  if (spot.rank < 0 && slow.size() >= 2 && node_of.size() == static_cast<size_t>(world)) {
    int nodes = 0;
    for (int n : std::set<int>(node_of.begin(), node_of.end()))
      if (std::all_of(slow.begin(), slow.end(), [&](const LinkTime& l) {
            return node_of[static_cast<size_t>(l.src)] == n || node_of[static_cast<size_t>(l.dst)] == n;
          }))
        spot.node = n, ++nodes;
    if (nodes != 1) spot.node = -1;
  }
  return spot;
}

}  // namespace hpc::doctor
