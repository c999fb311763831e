// Heartbeat: what this rank's main thread is doing, readable from any thread.
//
// Every collective a communicator starts gets the next number (#1, #2, …)
// of its group (dist/group.h: world, dp, tp, pp, embed; each rank is in one
// group of each kind): the ranks of a group call its collectives in the same
// order, so equal numbers in one group mean the same collective on every
// member, and a hang in one group is told apart from another. (Several
// communicators over one group, MPI and NCCL, share its numbers.) Point-to-
// point messages are numbered per peer and direction instead: send #k from
// a to b is b's receive #k from a. The trainer publishes the optimizer step.
// The watchdog thread (watchdog.h) reads this state to answer "where are
// you?" for a peer whose collective timed out, even while the main thread is
// stuck in computation and cannot answer itself. Relaxed atomics: the
// readers want a recent picture, not a consistent snapshot.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "dist/flight_recorder.h"
#include "dist/group.h"

namespace hpc::dist {

enum class CollOp : int32_t { None = 0, Allreduce, Broadcast, Allgather, Barrier, Gather, Send, Recv };

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
    case CollOp::Send:
      return "send";
    case CollOp::Recv:
      return "recv";
    default:
      return "none";
  }
}

inline bool is_p2p(CollOp op) { return op == CollOp::Send || op == CollOp::Recv; }

// Where a rank waits: collective #seq of a group, or (Send, Recv) message #seq to or from `peer`
// (a world rank) in that group.
struct WaitPoint {
  uint64_t seq = 0;
  CollOp op = CollOp::None;
  GroupKind group = GroupKind::World;
  int peer = -1;
};

inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Heartbeat {
 public:
  Heartbeat() : since_(monotonic_seconds()) {}

  // The optimizer step being computed (1-based; 0 = set-up).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // A collective of `group` starts: returns its number in that group.
  uint64_t start(GroupKind group = GroupKind::World) {
    since_.store(monotonic_seconds(), std::memory_order_relaxed);
    return started_[static_cast<size_t>(group)].fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // A point-to-point message starts: the time of the last activity moves (its number is the
  // communicator's, per peer and direction).
  void touch() { since_.store(monotonic_seconds(), std::memory_order_relaxed); }
  // The main thread blocks until collective `seq` of `group` (or message `seq` to or from peer) completes.
  void wait_begin(uint64_t seq, CollOp op, GroupKind group = GroupKind::World, int peer = -1) {
    waiting_op_.store(static_cast<int32_t>(op), std::memory_order_relaxed);
    waiting_group_.store(static_cast<int32_t>(group), std::memory_order_relaxed);
    waiting_peer_.store(peer, std::memory_order_relaxed);
    since_.store(monotonic_seconds(), std::memory_order_relaxed);
    waiting_on_.store(seq, std::memory_order_relaxed);
  }
  void wait_begin(const WaitPoint& at) { wait_begin(at.seq, at.op, at.group, at.peer); }
  void wait_end() {
    waiting_on_.store(0, std::memory_order_relaxed);
    since_.store(monotonic_seconds(), std::memory_order_relaxed);
  }

  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  // Collectives started in `group`.
  uint64_t started(GroupKind group = GroupKind::World) const {
    return started_[static_cast<size_t>(group)].load(std::memory_order_relaxed);
  }
  uint64_t waiting_on() const { return waiting_on_.load(std::memory_order_relaxed); }
  CollOp waiting_op() const { return static_cast<CollOp>(waiting_op_.load(std::memory_order_relaxed)); }
  GroupKind waiting_group() const {
    return static_cast<GroupKind>(waiting_group_.load(std::memory_order_relaxed));
  }
  int waiting_peer() const { return waiting_peer_.load(std::memory_order_relaxed); }
  WaitPoint waiting() const { return {waiting_on(), waiting_op(), waiting_group(), waiting_peer()}; }
  // Seconds in the current state: waiting for waiting_on(), or (when not
  // waiting) since this rank last started or finished waiting for a collective.
  double state_seconds() const { return monotonic_seconds() - since_.load(std::memory_order_relaxed); }
  // The last collectives this rank started (flight_recorder.h).
  FlightRecorder& flight() { return flight_; }

 private:
  std::atomic<int64_t> step_{0};
  std::array<std::atomic<uint64_t>, GROUP_KINDS> started_{};
  std::atomic<uint64_t> waiting_on_{0};
  std::atomic<int32_t> waiting_op_{0};
  std::atomic<int32_t> waiting_group_{0};
  std::atomic<int32_t> waiting_peer_{-1};
  std::atomic<double> since_;
  FlightRecorder flight_;
};

// Called when a collective of `group` (or a message) did not complete in
// time (or MPI reported a failure while waiting): finds out which rank is
// behind and returns the one-line explanation for the PeerError.
// Implemented by the Watchdog.
class HangHandler {
 public:
  virtual ~HangHandler() = default;
  virtual std::string explain(const GroupTag& group, const WaitPoint& at, const std::string& reason) = 0;
  // The world's collective #seq.
  std::string explain(uint64_t seq, CollOp op, const std::string& reason) {
    return explain(GroupTag(), WaitPoint{seq, op, GroupKind::World, -1}, reason);
  }
};

}  // namespace hpc::dist
