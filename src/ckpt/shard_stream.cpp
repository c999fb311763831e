// Checkpoint pieces between the ranks (see shard_stream.h).
#include "ckpt/shard_stream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace hpc::ckpt {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const Tensor& dataset_of(const ShardSnapshot& s, size_t k) {
  return k == 0 ? s.params : s.state[k - 1].value;
}

// The part [a, b) of the chunk [begin, end) that rank q owns.
std::pair<int64_t, int64_t> piece(const std::vector<int64_t>& bounds, int q, int64_t begin, int64_t end) {
  return {std::max(begin, bounds[static_cast<size_t>(q)]), std::min(end, bounds[static_cast<size_t>(q) + 1])};
}

}  // namespace

ShardChannel::ShardChannel(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
  if (MPI_Comm_dup(comm, &comm_) != MPI_SUCCESS) throw PeerError("checkpoint channel: MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

ShardChannel::~ShardChannel() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void ShardChannel::wait(std::vector<MPI_Request>& reqs, const std::vector<int>& peers,
                        const std::string& what) {
  const double t0 = now_s();
  for (;;) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      throw PeerError(what + ": MPI failed (a peer is gone)");
    if (done) return;
    const double waited = now_s() - t0;
    if (waited > timeout_s_) {
      std::string who;
      for (size_t i = 0; i < reqs.size(); ++i)
        if (reqs[i] != MPI_REQUEST_NULL) who += (who.empty() ? "" : ", ") + std::to_string(peers[i]);
      throw PeerError(what + " did not complete within " + std::to_string(static_cast<int>(timeout_s_)) +
                      " s (dist.timeout): rank(s) " + who + " did not answer");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(waited < 0.01 ? 20 : 500));
  }
}

StreamedSource::StreamedSource(ShardChannel& channel, const ShardSnapshot& own, int64_t chunk_elems)
    : channel_(channel), own_(own), chunk_(chunk_elems) {
  HPC_ASSERT(
      channel.rank() == 0 && own.rank == 0 && own.bounds.size() == static_cast<size_t>(channel.size()) + 1,
      "checkpoint stream: rank 0 writes");
}

void StreamedSource::read(size_t k, int64_t begin, const Tensor& out) {
  HPC_ASSERT(k == next_k_ && begin == next_begin_, "checkpoint stream: chunks read out of order");
  receive(k, begin, out);
}

void StreamedSource::receive(size_t k, int64_t begin, const Tensor& out) {
  const int64_t n = own_.bounds.back(), end = begin + out.count();
  HPC_ASSERT(end <= n && (out.count() == chunk_ || end == n), "checkpoint stream: a chunk of another size");
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  for (int q = 0; q < channel_.size(); ++q) {
    const auto [a, b] = piece(own_.bounds, q, begin, end);
    if (b <= a) continue;
    float* into = out.data<float>() + (a - begin);
    if (q == 0) {
      std::memcpy(into, dataset_of(own_, k).data<float>() + (a - own_.lo()), static_cast<size_t>(b - a) * 4);
      continue;
    }
    reqs.emplace_back();
    peers.push_back(q);
    if (MPI_Irecv(into, static_cast<int>(b - a), MPI_FLOAT, q, static_cast<int>(k), channel_.comm(),
                  &reqs.back()) != MPI_SUCCESS)
      throw PeerError("checkpoint: receiving a shard from rank " + std::to_string(q) + " failed");
  }
  channel_.wait(reqs, peers, "checkpoint: receiving the shards of flat dataset " + std::to_string(k));
  next_begin_ = end;
  if (end == n) next_k_ = k + 1, next_begin_ = 0;
}

void StreamedSource::drain() {
  const int64_t n = own_.bounds.back();
  if (n == 0) return;
  const Tensor scratch(Shape{std::min(chunk_, n)}, DType::F32);
  while (next_k_ < 1 + own_.state.size())
    receive(next_k_, next_begin_, scratch.slice(0, Shape{std::min(chunk_, n - next_begin_)}));
}

void serve_snapshot(ShardChannel& channel, const ShardSnapshot& snapshot, int64_t chunk_elems) {
  const int64_t n = snapshot.bounds.back();
  for (size_t k = 0; k < 1 + snapshot.state.size(); ++k)
    for (int64_t begin = 0; begin < n; begin += chunk_elems) {
      const auto [a, b] = piece(snapshot.bounds, snapshot.rank, begin, std::min(n, begin + chunk_elems));
      if (b <= a) continue;
      std::vector<MPI_Request> reqs(1);
      // One piece at a time: rank 0 takes a chunk at a time, so nothing more than a piece waits anywhere.
      if (MPI_Isend(dataset_of(snapshot, k).data<float>() + (a - snapshot.lo()), static_cast<int>(b - a),
                    MPI_FLOAT, 0, static_cast<int>(k), channel.comm(), reqs.data()) != MPI_SUCCESS)
        throw PeerError("checkpoint: sending this rank's shard to rank 0 failed");
      channel.wait(reqs, {0}, "checkpoint: sending this rank's shard of flat dataset " + std::to_string(k));
    }
}

}  // namespace hpc::ckpt
