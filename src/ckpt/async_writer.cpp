// Background checkpoint writes: see async_writer.h.
#include "ckpt/async_writer.h"

#include <chrono>
#include <filesystem>

#include "ckpt/store.h"
#include "core/error.h"
#include "core/fault.h"

namespace hpc::ckpt {

WriteResult run_write_job(const WriteJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  WriteResult r;
  r.step = job.step, r.path = job.path, r.why = job.why;
  r.stall_s = job.stall_s;
  r.start_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
  try {
    if (job.serve) {  // another rank's part: its pieces to rank 0, which reports the write
      serve_snapshot(*job.channel, job.shard);
      r.ok = true;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return r;
    }
    if (job.channel) {
      StreamedSource source(*job.channel, job.shard);
      write_checkpoint(job.path, job.checkpoint, &source);
    } else {
      write_checkpoint(job.path, job.checkpoint);
    }
    r.prune_lines = prune(job.dir, job.step, job.keep);
    std::error_code ec;
    r.bytes = static_cast<double>(std::filesystem::file_size(job.path, ec));
    r.ok = true;
  } catch (const IoError& e) {
    r.disk_full = true;
    r.error = e.what();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

AsyncWriter::~AsyncWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncWriter::start(WriteJob job) {
  HPC_ASSERT(!thread_.joinable(), "a checkpoint write is already in flight");
  step_ = job.step;
  job_ = std::move(job);
  done_.store(false);
  thread_ = std::thread([this] {
    FaultStepScope at_step(job_.step);
    result_ = run_write_job(job_);
    done_.store(true, std::memory_order_release);
  });
}

std::optional<WriteResult> AsyncWriter::poll() {
  if (!thread_.joinable() || !done_.load(std::memory_order_acquire)) return std::nullopt;
  return wait();
}

std::optional<WriteResult> AsyncWriter::wait() {
  if (!thread_.joinable()) return std::nullopt;
  thread_.join();
  spare_ = std::move(job_);
  job_ = WriteJob();
  return std::move(result_);
}

}  // namespace hpc::ckpt
