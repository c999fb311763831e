// Heartbeat: what this rank's main thread is doing, readable from any thread.
//
// Every collective a communicator starts gets the next number (#1, #2, …);
// all ranks call collectives in the same order, so equal numbers mean the
// same collective on every rank. The trainer publishes the optimizer step.
// The watchdog thread (watchdog.h) reads this state to answer "where are
// you?" for a peer whose collective timed out, even while the main thread is
// stuck in computation and cannot answer itself. Relaxed atomics: the
// readers want a recent picture, not a consistent snapshot.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "dist/flight_recorder.h"

namespace hpc::dist {

enum class CollOp : int32_t { None = 0, Allreduce, Broadcast, Allgather, Barrier, Gather };

inline const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::Allreduce:
      return "allreduce";
    case CollOp::Broadcast:
      return "broadcast";
    case CollOp::Allgather:
      return "allgather";
    case CollOp::Barrier:
      return "barrier";
    case CollOp::Gather:
      return "gather";
    default:
      return "none";
  }
}

inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Heartbeat {
 public:
  Heartbeat() : since_(monotonic_seconds()) {}

  // The optimizer step being computed (1-based; 0 = set-up).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // A collective starts: returns its number.
  uint64_t start() {
    since_.store(monotonic_seconds(), std::memory_order_relaxed);
    return started_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // The main thread blocks until collective `seq` completes.
  void wait_begin(uint64_t seq, CollOp op) {
    waiting_op_.store(static_cast<int32_t>(op), std::memory_order_relaxed);
    since_.store(monotonic_seconds(), std::memory_order_relaxed);
    waiting_on_.store(seq, std::memory_order_relaxed);
  }
  void wait_end() {
    waiting_on_.store(0, std::memory_order_relaxed);
    since_.store(monotonic_seconds(), std::memory_order_relaxed);
  }

  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  uint64_t started() const { return started_.load(std::memory_order_relaxed); }
  uint64_t waiting_on() const { return waiting_on_.load(std::memory_order_relaxed); }
  CollOp waiting_op() const { return static_cast<CollOp>(waiting_op_.load(std::memory_order_relaxed)); }
  // Seconds in the current state: waiting for waiting_on(), or (when not
  // waiting) since this rank last started or finished waiting for a collective.
  double state_seconds() const { return monotonic_seconds() - since_.load(std::memory_order_relaxed); }
  // The last collectives this rank started (flight_recorder.h).
  FlightRecorder& flight() { return flight_; }

 private:
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> waiting_on_{0};
  std::atomic<int32_t> waiting_op_{0};
  std::atomic<double> since_;
  FlightRecorder flight_;
};

// Called when a collective did not complete in time (or MPI reported a
// failure while waiting): finds out which rank is behind and returns the
// one-line explanation for the PeerError. Implemented by the Watchdog.
class HangHandler {
 public:
  virtual ~HangHandler() = default;
  virtual std::string explain(uint64_t seq, CollOp op, const std::string& reason) = 0;
};

}  // namespace hpc::dist
