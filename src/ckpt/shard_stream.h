// Checkpoints written from shards: no rank, the writer included, holds more
// of the model's state than its own shard plus one chunk.
//
// A save snapshots on every rank only its range [bounds[r], bounds[r+1]) of
// the flat parameters (full precision) and of every optimizer state
// (ShardSnapshot; the same ranges as ZeRO's shards, dist/shards.h, at every
// dist.zero: with the state replicated, each rank still sends only its
// part). Rank 0 writes the one file in today's layout; the checkpoint writer
// reads each flat dataset in order, chunk by chunk (FlatSource), and a
// StreamedSource assembles each chunk from the pieces the ranks owning it
// send (serve_snapshot, in exactly the order the writer reads). So the
// writer's extra memory is one chunk (CHUNK_ELEMS floats), whatever the
// model; every byte still passes its CRC-32, and the file is the same bits
// as one written from whole tensors.
//
// The pieces travel over a communicator of their own (ShardChannel, a
// duplicate of the world's), sent and received by each rank's checkpoint
// thread while training goes on (ckpt.async) or by the trainer itself,
// one chunk at a time, every wait bounded by dist.timeout (PeerError). If
// the write fails part way (a full disk), the writer still takes every
// piece (drain), so that no rank is left waiting to send.
//
// Why not parallel HDF5 (collective hyperslab writes through MPI-IO): it needs
// the MPI build of the library (libhdf5-openmpi), which would replace the
// serial one every other part of hpctrain and hpcdata links, and parallel file
// systems differ in how well they take N writers; one writer streaming at the
// file system's rate keeps today's crash-safety (temp file, fsync, rename)
// unchanged.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/tensor.h"

namespace hpc::ckpt {

// What a rank holds of the flat datasets at a save.
struct ShardSnapshot {
  std::vector<int64_t> bounds;  // world + 1 offsets: every rank's range of the flat datasets
  int rank = 0;
  Tensor params;                   // host float32, bounds[rank] .. bounds[rank + 1]
  std::vector<NamedTensor> state;  // the optimizer's states in its order, the same range
  int64_t lo() const { return bounds[static_cast<size_t>(rank)]; }
  int64_t hi() const { return bounds[static_cast<size_t>(rank) + 1]; }
};

// A communicator for checkpoint pieces (MPI_Comm_dup of `comm`: collective, on the main thread),
// used by one thread at a time; sends and receives wait at most timeout_s.
class ShardChannel {
 public:
  ShardChannel(MPI_Comm comm, double timeout_s);
  ~ShardChannel();
  ShardChannel(const ShardChannel&) = delete;
  ShardChannel& operator=(const ShardChannel&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Waits for every request (PeerError naming `what` and the peer after timeout_s).
  void wait(std::vector<MPI_Request>& reqs, const std::vector<int>& peers, const std::string& what);
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
};

// Rank 0: the flat datasets, chunk by chunk, from its own snapshot and the other ranks' pieces.
class StreamedSource final : public FlatSource {
 public:
  StreamedSource(ShardChannel& channel, const ShardSnapshot& own, int64_t chunk_elems = CHUNK_ELEMS);
  void read(size_t k, int64_t begin, const Tensor& out) override;
  void drain() override;

 private:
  void receive(size_t k, int64_t begin, const Tensor& out);  // the chunk at `begin` of dataset k into out
  ShardChannel& channel_;
  const ShardSnapshot& own_;
  int64_t chunk_;
  size_t next_k_ = 0;  // the next chunk expected: dataset and offset
  int64_t next_begin_ = 0;
};

// The other ranks: every piece of the snapshot that rank 0's writer will read, in its order.
void serve_snapshot(ShardChannel& channel, const ShardSnapshot& snapshot, int64_t chunk_elems = CHUNK_ELEMS);

}  // namespace hpc::ckpt
