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

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

HangReport describe_hang(int me, uint64_t seq, CollOp op, int64_t step, const std::string& reason,
                         const std::vector<PeerInfo>& peers, const std::vector<PeerState>& states,
                         bool asked) {
  HangReport rep;
  rep.reporter = me;
  rep.text =
      "collective #" + std::to_string(seq) + " (" + coll_op_name(op) + " " + step_text(step) + ") " + reason;
  if (!asked) {
    rep.text +=
        ": the other ranks could not be asked where they are (this MPI library does not provide "
        "MPI_THREAD_MULTIPLE)";
    return rep;
  }
  const int world = static_cast<int>(states.size());

  // The front: ranks blocked in the newest collective anyone is blocked in.
  uint64_t newest = 0;
  for (const PeerState& s : states)
    if (s.answered) newest = std::max(newest, s.waiting_on);
  std::vector<int> front;
  std::map<CollOp, std::vector<int>> front_ops;
  for (int r = 0; r < world; ++r) {
    const PeerState& s = states[static_cast<size_t>(r)];
    if (s.answered && newest > 0 && s.waiting_on == newest) {
      front.push_back(r);
      front_ops[s.waiting_op].push_back(r);
    }
  }
  if (!front.empty()) rep.reporter = front.front();

  // Everyone else is behind; ranks in the same situation are named together.
  using Key = std::tuple<int, int, int64_t, uint64_t, uint64_t>;  // kind, proc, step, started, waiting_on
  std::map<Key, std::vector<int>> groups;
  std::map<Key, double> group_seconds;
  for (int r = 0; r < world; ++r) {
    const PeerState& s = states[static_cast<size_t>(r)];
    if (s.answered && newest > 0 && s.waiting_on == newest) continue;
    Key k = !s.answered     ? Key{0, static_cast<int>(s.proc), 0, 0, 0}
            : !s.waiting_on ? Key{1, 0, s.step, s.started, 0}
                            : Key{2, static_cast<int>(s.waiting_op), s.step, 0, s.waiting_on};
    groups[k].push_back(r);
    group_seconds[k] = std::max(group_seconds[k], s.state_s);
  }

  std::vector<std::string> parts;
  for (const auto& [k, ranks] : groups) {
    const auto [kind, detail, k_step, started, waiting_on] = k;
    const bool one = ranks.size() == 1;
    std::string p = who(ranks, peers);
    if (kind == 0)
      p += std::string(one ? " does" : " do") + " not answer: " + proc_text(static_cast<ProcState>(detail));
    else if (kind == 1)
      p += std::string(one ? " is" : " are") + " stuck " + step_text(k_step) + ": no collective for " +
           seconds_text(group_seconds[k]) + ", the last was #" + std::to_string(started);
    else
      p += std::string(one ? " waits" : " wait") + " in #" + std::to_string(waiting_on) + " (" +
           coll_op_name(static_cast<CollOp>(detail)) + " " + step_text(k_step) + ") for " +
           seconds_text(group_seconds[k]);
    parts.push_back(p);
  }
  std::string body;
  const size_t shown = std::min<size_t>(parts.size(), 4);
  for (size_t i = 0; i < shown; ++i) body += (i ? "; " : "") + parts[i];
  if (parts.size() > shown)
    body += "; and " + std::to_string(parts.size() - shown) + " more group(s) of ranks";

  if (front_ops.size() > 1) {
    std::string ops;
    for (const auto& [o, ranks] : front_ops)
      ops += (ops.empty() ? "" : ", ") + std::string(ranks.size() == 1 ? "rank " : "ranks ") +
             rank_list(ranks) + " " + coll_op_name(o);
    body += std::string(body.empty() ? "" : "; ") + "the ranks disagree about what collective #" +
            std::to_string(newest) + " is (" + ops + "): they called collectives in different orders";
  } else if (!front.empty()) {
    if (parts.empty())
      body = "all " + std::to_string(world) + " ranks wait in #" + std::to_string(newest) +
             ": its data is not arriving (a network or MPI failure)";
    else
      body += std::string("; ") + (front.size() == 1 ? "rank " : "ranks ") + rank_list(front) +
              (front.size() == 1 ? " waits" : " wait") + " in #" + std::to_string(newest);
  }
  rep.text += ": " + body;
  return rep;
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
