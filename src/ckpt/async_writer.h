// Background checkpoint writes (ckpt.async): the trainer hands over a
// Checkpoint that is already a host snapshot (ckpt::capture makes deep host
// copies), and one thread writes it with write_checkpoint — the same file,
// temp name, fsync, rename and CRCs as a synchronous save — then prunes.
//
// At most one write is in flight: submit() first waits for the previous one
// (the caller logs how long). A finished write is reported once, by poll()
// or wait(), on the trainer's thread, so the log lines and the error of a
// failed write appear at a step boundary, in the order of the steps. A stop
// signal that lands on the writer thread only sets StopSignals' flag (its
// handler is SA_RESTART, so the write goes on). The thread runs the fault
// hook with the checkpoint's step (FaultStepScope), so HPCTRAIN_FAULT points
// in the writer name the step they save, as in a synchronous save.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/shard_stream.h"

namespace hpc::ckpt {

struct WriteJob {
  std::string path, dir, why;
  int64_t step = 0;
  int keep = 1;
  double stall_s =
      0;  // what taking the snapshot cost training at the step boundary (reported with the result)
  Checkpoint checkpoint;
  // Several ranks (ckpt/shard_stream.h): this rank's snapshot of the flat datasets and the channel
  // they travel on; rank 0 writes the file from every rank's pieces, the others (serve) send theirs.
  std::shared_ptr<ShardChannel> channel;
  ShardSnapshot shard;
  bool serve = false;
};

struct WriteResult {
  int64_t step = 0;
  std::string path, why;
  bool ok = false;
  bool disk_full = false;  // IoError (ENOSPC, EDQUOT): the run must stop
  std::string error;       // what() of the failure
  double seconds = 0;      // the write, prune included
  double start_s = 0;
  double stall_s =
      0;  // WriteJob::stall_s      // when it began (steady clock, seconds since its epoch: timelines)
  double bytes = 0;
  std::vector<std::string> prune_lines;
};

// Runs one job on the calling thread (the synchronous path, and the writer thread's body).
WriteResult run_write_job(const WriteJob& job);

class AsyncWriter {
 public:
  AsyncWriter() = default;
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;
  ~AsyncWriter();  // waits for the write in flight (a complete file, never half of one)

  bool in_flight() const { return thread_.joinable(); }
  // The step being written (valid while in_flight()).
  int64_t in_flight_step() const { return step_; }
  // Starts the job in the background. Precondition: nothing in flight (call wait() first).
  void start(WriteJob job);
  // The finished write's result, if the one in flight is done; never blocks.
  std::optional<WriteResult> poll();
  // Blocks until the write in flight is done; its result (nothing when none was in flight).
  std::optional<WriteResult> wait();
  // The finished write's job (after poll()/wait() returned it): its snapshot's host
  // tensors are reused by the next ckpt::capture, so a snapshot writes into
  // memory that is already touched instead of allocating and faulting it in.
  WriteJob take_spare() { return std::move(spare_); }

 private:
  std::thread thread_;
  std::atomic<bool> done_{false};
  int64_t step_ = 0;
  WriteJob job_;
  WriteResult result_;
  WriteJob spare_;
};

}  // namespace hpc::ckpt
