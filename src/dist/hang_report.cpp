// Hang reports (see hang_report.h).
#include "dist/hang_report.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace hpc::dist {

namespace {

std::string step_text(int64_t step) { return step > 0 ? "at step " + std::to_string(step) : "during set-up"; }

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

const char* proc_text(ProcState p) {
  switch (p) {
    case ProcState::Gone:
      return "its process is gone (killed or crashed)";
    case ProcState::Stopped:
      return "its process is stopped (SIGSTOP or a debugger)";
    case ProcState::Running:
      return "its process is alive but does not answer (frozen or swapping)";
    default:
      return "it died, froze, or its node is unreachable";
  }
}

// "rank 1 (host n07, pid 4242)" or "ranks 8-15 (on n09, n10)".
std::string who(const std::vector<int>& ranks, const std::vector<PeerInfo>& peers) {
  if (ranks.size() == 1) {
    const PeerInfo& p = peers[static_cast<size_t>(ranks[0])];
    return "rank " + std::to_string(ranks[0]) + " (host " + p.host + ", pid " + std::to_string(p.pid) + ")";
  }
  std::set<std::string> hosts;
  for (int r : ranks) hosts.insert(peers[static_cast<size_t>(r)].host);
  std::string h;
  int shown = 0;
  for (const std::string& name : hosts) {
    if (shown++ == 3) {
      h += ", …";
      break;
    }
    h += (h.empty() ? "" : ", ") + name;
  }
  return "ranks " + rank_list(ranks) + " (on " + h + ")";
}

}  // namespace

namespace {

// Where a rank waits, said from the reporter's point of view: "#41 (allreduce at step 12)" in the
// reporter's own group, "#12 of dp[1,3] (allreduce at step 12)" in another, "recv #5 from rank 3 of
// pp[1,3] (at step 12)" for a message.
std::string wait_text(const WaitPoint& w, int64_t step, const std::string& group_name, bool own_group) {
  const std::string of = own_group ? "" : " of " + group_name;
  if (is_p2p(w.op))
    return std::string(coll_op_name(w.op)) + " #" + std::to_string(w.seq) +
           (w.op == CollOp::Send ? " to rank " : " from rank ") + std::to_string(w.peer) + " of " +
           group_name + " (" + step_text(step) + ")";
  return "#" + std::to_string(w.seq) + of + " (" + coll_op_name(w.op) + " " + step_text(step) + ")";
}

}  // namespace

HangReport describe_hang(int me, const GroupTag& group, const WaitPoint& at, int64_t step,
                         const std::string& reason, const std::vector<PeerInfo>& peers,
                         const std::vector<PeerState>& states, bool asked, const GridShape& shape) {
  HangReport rep;
  rep.reporter = me;
  const bool world_group = group.kind == GroupKind::World;
  const std::string name = world_group ? "world" : group.name;
  rep.text = (is_p2p(at.op) ? "" : "collective ") + wait_text(at, step, name, world_group) + " " + reason;
  if (!asked) {
    rep.text +=
        ": the other ranks could not be asked where they are (this MPI library does not provide "
        "MPI_THREAD_MULTIPLE)";
    return rep;
  }
  // The ranks this wait depends on: the group's (the world: everyone), or the message's two ends.
  std::vector<int> members;
  if (is_p2p(at.op))
    members = {std::min(me, at.peer), std::max(me, at.peer)};
  else if (world_group || group.ranks.empty())
    for (int r = 0; r < static_cast<int>(states.size()); ++r) members.push_back(r);
  else
    members = group.ranks;
  auto state = [&](int r) -> const PeerState& { return states[static_cast<size_t>(r)]; };
  auto in_this = [&](const PeerState& s) {
    return s.answered && s.waiting_on > 0 && s.waiting_group == group.kind && !is_p2p(s.waiting_op);
  };

  // The front: ranks blocked in the newest collective of this group anyone is blocked in (for a
  // message: the reporter).
  uint64_t newest = 0;
  std::vector<int> front;
  std::map<CollOp, std::vector<int>> front_ops;
  if (is_p2p(at.op)) {
    front.push_back(me);
  } else {
    for (int r : members)
      if (in_this(state(r))) newest = std::max(newest, state(r).waiting_on);
    for (int r : members)
      if (in_this(state(r)) && newest > 0 && state(r).waiting_on == newest) {
        front.push_back(r);
        front_ops[state(r).waiting_op].push_back(r);
      }
  }
  if (!front.empty()) rep.reporter = front.front();

  // Everyone else is behind; ranks in the same situation are named together.
  // kind (0 silent, 1 computing, 2 waiting), proc or op, step, started, waiting_on, where (text)
  using Key = std::tuple<int, int, int64_t, uint64_t, uint64_t, std::string>;
  std::map<Key, std::vector<int>> groups;
  std::map<Key, double> group_seconds;
  for (int r : members) {
    if (std::find(front.begin(), front.end(), r) != front.end()) continue;
    const PeerState& s = state(r);
    const size_t kind = static_cast<size_t>(is_p2p(at.op) ? at.group : group.kind);
    Key k;
    if (!s.answered) {
      k = Key{0, static_cast<int>(s.proc), 0, 0, 0, ""};
    } else if (!s.waiting_on) {
      k = Key{1, 0, s.step, s.started[kind], 0, ""};
    } else {
      const WaitPoint w{s.waiting_on, s.waiting_op, s.waiting_group, s.waiting_peer};
      const bool own = !is_p2p(at.op) && !is_p2p(w.op) && s.waiting_group == group.kind;
      k = Key{2,
              static_cast<int>(s.waiting_op),
              s.step,
              0,
              s.waiting_on,
              wait_text(w, s.step, shape.group_name(s.waiting_group, r), own)};
    }
    groups[k].push_back(r);
    group_seconds[k] = std::max(group_seconds[k], s.state_s);
  }

  std::vector<std::string> parts;
  for (const auto& [k, ranks] : groups) {
    const auto& [kind, detail, k_step, started, waiting_on, where] = k;
    const bool one = ranks.size() == 1;
    std::string p = who(ranks, peers);
    if (kind == 0)
      p += std::string(one ? " does" : " do") + " not answer: " + proc_text(static_cast<ProcState>(detail));
    else if (kind == 1)
      p += std::string(one ? " is" : " are") + " stuck " + step_text(k_step) + ": no collective for " +
           seconds_text(group_seconds[k]) + ", the last was #" + std::to_string(started);
    else
      p += std::string(one ? " waits" : " wait") + " in " + where + " for " + seconds_text(group_seconds[k]);
    parts.push_back(p);
  }
  std::string body;
  const size_t shown = std::min<size_t>(parts.size(), 4);
  for (size_t i = 0; i < shown; ++i) body += (i ? "; " : "") + parts[i];
  if (parts.size() > shown)
    body += "; and " + std::to_string(parts.size() - shown) + " more group(s) of ranks";

  const std::string in_group = world_group ? "" : " of " + name;
  if (front_ops.size() > 1) {
    std::string ops;
    for (const auto& [o, ranks] : front_ops)
      ops += (ops.empty() ? "" : ", ") + std::string(ranks.size() == 1 ? "rank " : "ranks ") +
             rank_list(ranks) + " " + coll_op_name(o);
    body += std::string(body.empty() ? "" : "; ") + "the ranks disagree about what collective #" +
            std::to_string(newest) + in_group + " is (" + ops +
            "): they called collectives in different orders";
  } else if (!front.empty() && !is_p2p(at.op)) {
    if (parts.empty())
      body = "all " + std::to_string(members.size()) + " ranks" + (world_group ? "" : " of " + name) +
             " wait in #" + std::to_string(newest) + ": its data is not arriving (a network or MPI failure)";
    else
      body += std::string("; ") + (front.size() == 1 ? "rank " : "ranks ") + rank_list(front) +
              (front.size() == 1 ? " waits" : " wait") + " in #" + std::to_string(newest) + in_group;
  }
  rep.text += ": " + body;
  return rep;
}

HangReport describe_hang(int me, uint64_t seq, CollOp op, int64_t step, const std::string& reason,
                         const std::vector<PeerInfo>& peers, const std::vector<PeerState>& states,
                         bool asked) {
  const int world = static_cast<int>(states.empty() ? peers.size() : states.size());
  return describe_hang(me, GroupTag::world(world), WaitPoint{seq, op, GroupKind::World, -1}, step, reason,
                       peers, states, asked, GridShape{world, 1, 1});
}

ProcState probe_process(int pid) {
  if (pid <= 0) return ProcState::Unknown;
  if (kill(pid, 0) != 0 && errno == ESRCH) return ProcState::Gone;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return ProcState::Unknown;
  // Field 3 follows the parenthesised command name, which may itself contain spaces.
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return ProcState::Unknown;
  char state = line[close + 2];
  if (state == 'Z' || state == 'X') return ProcState::Gone;
  if (state == 'T' || state == 't') return ProcState::Stopped;
  return ProcState::Running;
}

}  // namespace hpc::dist
