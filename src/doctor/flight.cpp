// doctor --flight: see flight.h.
#include "doctor/flight.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
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
  if (o.op != "barrier") s += " of " + std::to_string(o.count) + " " + o.dtype;
  return s + " at step " + std::to_string(o.step);
}

const FlightOp* find_op(const FlightFile& f, uint64_t seq) {
  for (const FlightOp& o : f.ops)
    if (o.seq == seq) return &o;
  return nullptr;
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
    o.op = str_value(line, "op", path);
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
  // Each rank's frontier: its first collective not completed, else the one after its last.
  std::map<int, uint64_t> last_started, last_completed;
  uint64_t first_open = UINT64_MAX;
  for (const auto& [r, f] : by_rank) {
    uint64_t started = 0, completed = 0, open = UINT64_MAX;
    for (const FlightOp& o : f->ops) {
      started = std::max(started, o.seq);
      if (o.state == "completed")
        completed = std::max(completed, o.seq);
      else
        open = std::min(open, o.seq);
    }
    last_started[r] = started, last_completed[r] = completed;
    first_open = std::min(first_open, open == UINT64_MAX ? started + 1 : open);
  }
  uint64_t newest = 0;
  for (const auto& [r, s] : last_started) newest = std::max(newest, s);
  v.diverged = !by_rank.empty() && (first_open <= newest || !v.missing.empty());
  v.seq = first_open;
  const FlightOp* what = nullptr;
  for (const auto& [r, f] : by_rank) {
    const FlightOp* o = find_op(*f, v.seq);
    if (o == nullptr && last_started[r] < v.seq)
      v.behind.push_back(r);
    else if (o != nullptr && o->state != "completed")
      v.waiting.push_back(r);
    if (o != nullptr && what == nullptr) what = o;
  }
  if (what != nullptr) v.what = describe(*what);

  v.lines.push_back("flight records: " + std::to_string(by_rank.size()) + " of " + std::to_string(world) +
                    " rank(s)");
  if (!v.diverged) {
    v.lines.push_back("no diverging collective: every rank completed every collective up to #" +
                      std::to_string(newest));
    return v;
  }
  std::string line =
      "diverging collective: #" + std::to_string(v.seq) + (v.what.empty() ? "" : " (" + v.what + ")");
  if (!v.waiting.empty()) line += ": rank(s) " + dist::rank_list(v.waiting) + " wait in it";
  if (!v.behind.empty())
    line += std::string(v.waiting.empty() ? ": " : "; ") + "rank(s) " + dist::rank_list(v.behind) +
            " never started it";
  v.lines.push_back(line);
  for (const auto& [r, f] : by_rank) {
    const FlightOp* done = find_op(*f, last_completed[r]);
    const FlightOp* last = find_op(*f, last_started[r]);
    std::string l = "  rank " + std::to_string(r) + " (" + f->host + "): last completed #" +
                    std::to_string(last_completed[r]) + (done ? " (" + describe(*done) + ")" : "");
    if (last_started[r] != last_completed[r])
      l += ", last started #" + std::to_string(last_started[r]) + (last ? " (" + describe(*last) + ")" : "");
    if (std::find(v.behind.begin(), v.behind.end(), r) != v.behind.end())
      l += ": BEHIND (stuck in computation before #" + std::to_string(v.seq) + ", or stopped)";
    v.lines.push_back(l);
  }
  if (!v.missing.empty())
    v.lines.push_back("no record from rank(s) " + dist::rank_list(v.missing) +
                      ": unreachable (dead, or run.dir is not shared with their node)");
  if (!v.behind.empty())
    v.lines.push_back(
        "problem: rank(s) " + dist::rank_list(v.behind) + " fell behind at collective #" +
        std::to_string(v.seq) +
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
