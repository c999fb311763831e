// Naming the culprit of a hang: from every rank's last known state, one line
// that says which ranks are behind and where.
//
//   collective #41 (allreduce at step 12) did not complete within 30 s (dist.timeout):
//   rank 1 (host n07, pid 4242) is stuck at step 12: no collective for 31.0 s, its last was #40;
//   ranks 0,2-3 wait in #41
//
// A collective of a group other than the world says which group
// ("collective #41 of tp[0-1] (allreduce at step 12) …"), and only the
// group's members are named: a collective waits for them alone. A message
// names its two ends ("recv #5 from rank 3 of pp[1,3] (at step 12) …").
//
// A pure function of the states (the Watchdog collects them), so every
// wording is unit-tested without MPI.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/group.h"
#include "dist/heartbeat.h"

namespace hpc::dist {

struct PeerInfo {
  std::string host;
  int pid = 0;
};

// What the OS says about a rank that did not answer (only knowable on the same host).
enum class ProcState { Unknown, Running, Stopped, Gone };

struct PeerState {
  bool answered = false;
  int64_t step = 0;
  std::array<uint64_t, GROUP_KINDS> started{};  // collectives started, per group kind
  uint64_t waiting_on = 0;                      // collective (or message) it is blocked in; 0 = not in one
  CollOp waiting_op = CollOp::None;
  GroupKind waiting_group = GroupKind::World;
  int waiting_peer = -1;
  double state_s = 0;  // seconds in that state
  ProcState proc = ProcState::Unknown;
};

struct HangReport {
  std::string text;
  int reporter = 0;  // the lowest rank among those waiting in the newest collective: it prints
};

// me waited at `at` (a collective of `group`, or a message to or from at.peer) during `step` and gave
// up with `reason`. states: every world rank's (the watchdog asks them all); shape names the groups
// other ranks wait in. asked = false when the other ranks could not be queried (no watchdog threads).
HangReport describe_hang(int me, const GroupTag& group, const WaitPoint& at, int64_t step,
                         const std::string& reason, const std::vector<PeerInfo>& peers,
                         const std::vector<PeerState>& states, bool asked, const GridShape& shape);
// The world's collective #seq (`op`).
HangReport describe_hang(int me, uint64_t seq, CollOp op, int64_t step, const std::string& reason,
                         const std::vector<PeerInfo>& peers, const std::vector<PeerState>& states,
                         bool asked);

// Looks up a process of this host: gone, stopped or running.
ProcState probe_process(int pid);

}  // namespace hpc::dist
