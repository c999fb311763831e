// doctor --flight: see flight.h.
#include "doctor/flight.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "dist/group.h"
#include "dist/hang_report.h"

namespace hpc::doctor {

namespace {

// The value after "key": in one line of FlightRecorder's output (numbers and plain strings).
bool find_value(const std::string& line, const std::string& key, std::string& out) {
  const std::string k = "\"" + key + "\": ";
  const size_t at = line.find(k);
  if (at == std::string::npos) return false;
  size_t b = at + k.size();
  if (b < line.size() && line[b] == '"') {
    const size_t e = line.find('"', b + 1);
    if (e == std::string::npos) return false;
    out = line.substr(b + 1, e - b - 1);
    return true;
  }
  size_t e = b;
  while (e < line.size() && line[e] != ',' && line[e] != '}' && line[e] != ']') ++e;
  out = line.substr(b, e - b);
  return !out.empty();
}

int64_t int_value(const std::string& line, const std::string& key, const std::string& path) {
  std::string v;
  if (!find_value(line, key, v)) throw UserError("flight record '" + path + "': no \"" + key + "\"");
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    throw UserError("flight record '" + path + "': \"" + key + "\" is not a number");
  }
}

std::string str_value(const std::string& line, const std::string& key, const std::string& path) {
  std::string v;
  if (!find_value(line, key, v)) throw UserError("flight record '" + path + "': no \"" + key + "\"");
  return v;
}

std::string describe(const FlightOp& o) {
  std::string s = o.op;
  if (o.op == "send" || o.op == "recv")
    s += std::string(o.op == "send" ? " to" : " from") + " rank " + std::to_string(o.peer);
  if (o.op != "barrier") s += " of " + std::to_string(o.count) + " " + o.dtype;
  return s + " at step " + std::to_string(o.step);
}

bool is_message(const FlightOp& o) { return o.op == "send" || o.op == "recv"; }

// "#41" in the world, "#41 of tp[0-1]" in a group.
std::string numbered(uint64_t seq, const std::string& group) {
  return "#" + std::to_string(seq) + (group == "world" ? "" : " of " + group);
}

const FlightOp* find_op(const FlightFile& f, const std::string& group, uint64_t seq) {
  for (const FlightOp& o : f.ops)
    if (!is_message(o) && o.group == group && o.seq == seq) return &o;
  return nullptr;
}

// One group's collectives among its members' files.
struct GroupVerdict {
  std::string group;
  bool diverged = false;
  uint64_t seq = 0, newest = 0;
  std::string what;
  std::vector<int> behind, waiting;
};

GroupVerdict analyse_group(const std::map<int, const FlightFile*>& by_rank, const std::string& group,
                           const std::vector<int>& members) {
  GroupVerdict v;
  v.group = group;
  // Each member's frontier: its first collective of the group not completed, else the one after its last.
  std::map<int, uint64_t> last_started;
  uint64_t first_open = UINT64_MAX;
  bool missing = false;
  for (int r : members) {
    auto it = by_rank.find(r);
    if (it == by_rank.end()) {
      missing = true;
      continue;
    }
    uint64_t started = 0, open = UINT64_MAX;
    for (const FlightOp& o : it->second->ops) {
      if (is_message(o) || o.group != group) continue;
      started = std::max(started, o.seq);
      if (o.state != "completed") open = std::min(open, o.seq);
    }
    last_started[r] = started;
    first_open = std::min(first_open, open == UINT64_MAX ? started + 1 : open);
  }
  for (const auto& [r, st] : last_started) v.newest = std::max(v.newest, st);
  v.diverged = !last_started.empty() && (first_open <= v.newest || (missing && v.newest > 0));
  v.seq = first_open;
  const FlightOp* what = nullptr;
  for (const auto& [r, st] : last_started) {
    const FlightOp* o = find_op(*by_rank.at(r), group, v.seq);
    if (o == nullptr && st < v.seq)
      v.behind.push_back(r);
    else if (o != nullptr && o->state != "completed")
      v.waiting.push_back(r);
    if (o != nullptr && what == nullptr) what = o;
  }
  if (what != nullptr) v.what = describe(*what);
  return v;
}

}  // namespace

FlightFile parse_flight(const std::string& text, const std::string& path) {
  FlightFile f;
  f.path = path;
  std::istringstream in(text);
  std::string line;
  bool head = false;
  while (std::getline(in, line)) {
    if (!head) {
      if (line.find("\"format\": \"hpctrain-flight-1\"") == std::string::npos)
        throw UserError("flight record '" + path + "': not a flight record of this hpctrain version");
      f.rank = static_cast<int>(int_value(line, "rank", path));
      f.host = str_value(line, "host", path);
      f.reason = str_value(line, "reason", path);
      head = true;
      continue;
    }
    if (line.find("\"seq\": ") == std::string::npos) continue;
    FlightOp o;
    o.seq = static_cast<uint64_t>(int_value(line, "seq", path));
    std::string group;
    if (find_value(line, "group", group)) o.group = group;
    o.op = str_value(line, "op", path);
    if (o.op == "send" || o.op == "recv") o.peer = static_cast<int>(int_value(line, "peer", path));
    o.count = int_value(line, "count", path);
    o.dtype = str_value(line, "dtype", path);
    o.step = int_value(line, "step", path);
    o.state = str_value(line, "state", path);
    f.ops.push_back(o);
  }
  if (!head) throw UserError("flight record '" + path + "': empty");
  return f;
}

FlightVerdict analyse_flight(const std::vector<FlightFile>& files, int world) {
  FlightVerdict v;
  std::map<int, const FlightFile*> by_rank;
  for (const FlightFile& f : files) by_rank[f.rank] = &f;
  for (int r = 0; r < world; ++r)
    if (!by_rank.count(r)) v.missing.push_back(r);

  // The groups the records name; each is analysed among its own members (the world: every rank).
  std::set<std::string> names;
  for (const auto& [r, f] : by_rank)
    for (const FlightOp& o : f->ops)
      if (!is_message(o)) names.insert(o.group);
  std::vector<GroupVerdict> groups;
  for (const std::string& name : names) {
    dist::GroupKind kind = dist::GroupKind::World;
    std::vector<int> members;
    if (!dist::parse_group_name(name, kind, members) || kind == dist::GroupKind::World) {
      members.clear();
      for (int r = 0; r < world; ++r) members.push_back(r);
    }
    groups.push_back(analyse_group(by_rank, name, members));
  }
  // The world first: its divergence is the one a world-only run has always reported.
  std::stable_sort(groups.begin(), groups.end(), [](const GroupVerdict& a, const GroupVerdict& b) {
    return (a.group == "world") > (b.group == "world");
  });

  // Messages: an open receive (send) whose peer never started the matching send (receive).
  struct OpenMessage {
    int rank;
    const FlightOp* op;
    bool peer_started;
  };
  std::vector<OpenMessage> open_messages;
  std::set<int> waits_somewhere;  // ranks with a collective or message started and not completed
  for (const auto& [r, f] : by_rank)
    for (const FlightOp& o : f->ops) {
      if (o.state == "completed") continue;
      waits_somewhere.insert(r);
      if (!is_message(o)) continue;
      bool started = false;
      auto peer = by_rank.find(o.peer);
      if (peer != by_rank.end())
        for (const FlightOp& p : peer->second->ops)
          started |= is_message(p) && p.op != o.op && p.peer == r && p.seq == o.seq && p.group == o.group;
      open_messages.push_back({r, &o, started});
    }

  v.lines.push_back("flight records: " + std::to_string(by_rank.size()) + " of " + std::to_string(world) +
                    " rank(s)");
  std::set<int> behind_somewhere;
  bool first = true;
  for (const GroupVerdict& g : groups) {
    if (!g.diverged) continue;
    if (first) {
      v.diverged = true;
      v.group = g.group, v.seq = g.seq, v.what = g.what, v.behind = g.behind, v.waiting = g.waiting;
      first = false;
    }
    behind_somewhere.insert(g.behind.begin(), g.behind.end());
    std::string line =
        "diverging collective: " + numbered(g.seq, g.group) + (g.what.empty() ? "" : " (" + g.what + ")");
    if (!g.waiting.empty()) line += ": rank(s) " + dist::rank_list(g.waiting) + " wait in it";
    if (!g.behind.empty())
      line += std::string(g.waiting.empty() ? ": " : "; ") + "rank(s) " + dist::rank_list(g.behind) +
              " never started it";
    v.lines.push_back(line);
  }
  for (const OpenMessage& m : open_messages) {
    v.diverged = true;
    std::string line = "waiting message: rank " + std::to_string(m.rank) + " in " + m.op->op + " #" +
                       std::to_string(m.op->seq) + (m.op->op == "send" ? " to" : " from") + " rank " +
                       std::to_string(m.op->peer) + " of " + m.op->group + " (" + describe(*m.op) + ")";
    if (!m.peer_started) {
      line += ": rank " + std::to_string(m.op->peer) + " never started its " +
              (m.op->op == "send" ? "receive" : "send");
      behind_somewhere.insert(m.op->peer);
    }
    v.lines.push_back(line);
  }
  if (!v.diverged && v.missing.empty()) {
    uint64_t newest = 0;
    for (const GroupVerdict& g : groups) newest = std::max(newest, g.newest);
    v.lines.push_back(groups.size() <= 1
                          ? "no diverging collective: every rank completed every collective up to #" +
                                std::to_string(newest)
                          : "no diverging collective: every rank completed every collective of its " +
                                std::to_string(groups.size()) + " groups");
    return v;
  }
  if (!v.missing.empty()) v.diverged = true;
  for (int r : behind_somewhere)
    if (!waits_somewhere.count(r)) v.culprits.push_back(r);
  // Where a culprit fell behind: the first diverging collective it never started.
  auto behind_at = [&](int r) {
    for (const GroupVerdict& g : groups)
      if (g.diverged && std::find(g.behind.begin(), g.behind.end(), r) != g.behind.end())
        return numbered(g.seq, g.group);
    for (const OpenMessage& m : open_messages)
      if (!m.peer_started && m.op->peer == r)
        return std::string(m.op->op == "send" ? "receive" : "send") + " #" + std::to_string(m.op->seq) +
               (m.op->op == "send" ? " from" : " to") + " rank " + std::to_string(m.rank);
    return numbered(v.seq, v.group.empty() ? "world" : v.group);
  };

  for (const auto& [r, f] : by_rank) {
    // The newest completed and the newest started entries of this rank (any group).
    const FlightOp *done = nullptr, *last = nullptr;
    for (const FlightOp& o : f->ops) {
      last = &o;
      if (o.state == "completed") done = &o;
    }
    auto label = [](const FlightOp* o) {
      return o == nullptr
                 ? std::string("none")
                 : (is_message(*o) ? o->op + " #" + std::to_string(o->seq) : numbered(o->seq, o->group)) +
                       " (" + describe(*o) + ")";
    };
    std::string l = "  rank " + std::to_string(r) + " (" + f->host + "): last completed " + label(done);
    if (last != nullptr && last != done) l += ", last started " + label(last);
    if (std::find(v.culprits.begin(), v.culprits.end(), r) != v.culprits.end())
      l += ": BEHIND (stuck in computation before " + behind_at(r) + ", or stopped)";
    v.lines.push_back(l);
  }
  if (!v.missing.empty())
    v.lines.push_back("no record from rank(s) " + dist::rank_list(v.missing) +
                      ": unreachable (dead, or run.dir is not shared with their node)");
  if (!v.culprits.empty())
    v.lines.push_back(
        "problem: rank(s) " + dist::rank_list(v.culprits) + " fell behind at collective " +
        behind_at(v.culprits.front()) +
        "; fix: look at what they compute there (their stack: py-spy/gdb -p PID while it hangs), "
        "or their node's health");
  return v;
}

int run_flight(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::vector<FlightFile> files;
  std::error_code ec;
  int world = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("flight-", 0) != 0 || e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    try {
      files.push_back(parse_flight(text.str(), e.path().string()));
      world = std::max(world, files.back().rank + 1);
    } catch (const UserError& err) {
      std::fprintf(stderr, "hpctrain: error: %s\n", err.what());
      return EXIT_BAD_INPUT;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "hpctrain: error: --flight %s: no flight-RANK.json there%s\n", run_dir.c_str(),
                 ec ? (": " + ec.message()).c_str()
                    : " (they are written when a collective times out, on SIGUSR2, or on a crash)");
    return EXIT_BAD_INPUT;
  }
  std::sort(files.begin(), files.end(),
            [](const FlightFile& a, const FlightFile& b) { return a.rank < b.rank; });
  // The world size: the records hold no more than their own rank; a config.ini beside them may say more.
  const FlightVerdict v = analyse_flight(files, world);
  std::printf("hpctrain doctor --flight %s\n", run_dir.c_str());
  for (const std::string& l : v.lines) std::printf("%s\n", l.c_str());
  return v.diverged ? 1 : 0;
}

}  // namespace hpc::doctor
