// Test-only fault injection (see fault_injection.h for the grammar and why
// the plan is process-wide).
#include "dist/fault_injection.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace hpc::dist {

namespace {

constexpr FaultKind ALL_KINDS[] = {FaultKind::Enospc,  FaultKind::Eio,     FaultKind::Stall, FaultKind::Exit,
                                   FaultKind::SigUsr1, FaultKind::SigTerm, FaultKind::SigInt};
constexpr FaultPoint ALL_POINTS[] = {FaultPoint::Step,       FaultPoint::Backward,  FaultPoint::Allreduce,
                                     FaultPoint::CkptWrite,  FaultPoint::CkptClose, FaultPoint::CkptFsync,
                                     FaultPoint::CkptRename, FaultPoint::Metrics,   FaultPoint::DataRead};

bool is_signal(FaultKind k) {
  return k == FaultKind::SigUsr1 || k == FaultKind::SigTerm || k == FaultKind::SigInt;
}
bool is_io(FaultKind k) { return k == FaultKind::Enospc || k == FaultKind::Eio; }

// The kinds each point can take: only what the code at that point can suffer.
bool allowed(FaultKind k, FaultPoint p) {
  switch (p) {
    case FaultPoint::Step:
      return k == FaultKind::Stall || k == FaultKind::Exit || is_signal(k);
    case FaultPoint::Backward:
    case FaultPoint::Allreduce:
      return is_signal(k);
    case FaultPoint::CkptWrite:
      return k == FaultKind::Enospc || is_signal(k);
    case FaultPoint::CkptClose:
    case FaultPoint::CkptFsync:
    case FaultPoint::CkptRename:
    case FaultPoint::Metrics:
      return k == FaultKind::Enospc;
    case FaultPoint::DataRead:
      return k == FaultKind::Eio;
  }
  return false;
}

// The installed plan. Written by install_faults() before other threads
// exist, read-only afterwards; `active` publishes it.
struct State {
  std::atomic<bool> active{false};
  std::atomic<int64_t> step{0};
  int rank = -1;
  std::vector<Fault> faults;
  std::unique_ptr<std::atomic<bool>[]>
      fired;  // one per fault: one-shot faults fire once, I/O faults log once
};

State& state() {
  static State s;  // the one mutable global of the hook (see the header)
  return s;
}

[[noreturn]] void bad(const std::string& var, const std::string& text, const std::string& why) {
  throw UserError(var + "='" + text + "': " + why +
                  " (test-only fault injection; see src/dist/fault_injection.h)");
}

bool parse_int(const std::string& s, long long lo, long long& out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  out = std::atoll(s.c_str());
  return out >= lo;
}

// One KIND@POINT[:RANK[:STEP]] item of `whole` (what an error message quotes).
Fault parse_one(const std::string& var, const std::string& text, const std::string& whole) {
  const std::string expected = "expected KIND@POINT[:RANK[:STEP]]";
  auto fail = [&](const std::string& why) {
    bad(var, whole, (text == whole ? "" : "in '" + text + "': ") + why);
  };
  const size_t at = text.find('@');
  if (at == std::string::npos) fail(expected);
  Fault f;
  f.text = var + "=" + text;
  const std::string kind = text.substr(0, at);
  std::string rest = text.substr(at + 1);
  bool found = false;
  for (FaultKind k : ALL_KINDS)
    if (kind == fault_kind_name(k)) f.kind = k, found = true;
  if (!found) fail("unknown kind '" + kind + "' (enospc, eio, stall, exit, sigusr1, sigterm, sigint)");
  const size_t c1 = rest.find(':');
  const std::string point = rest.substr(0, c1);
  found = false;
  for (FaultPoint p : ALL_POINTS)
    if (point == fault_point_name(p)) f.point = p, found = true;
  if (!found)
    fail(
        "unknown point '" + point +
        "' (step, backward, allreduce, ckpt_write, ckpt_close, ckpt_fsync, ckpt_rename, metrics, data_read)");
  if (!allowed(f.kind, f.point))
    fail(std::string("'") + fault_kind_name(f.kind) + "' cannot happen at '" + point + "'");
  if (c1 == std::string::npos) return f;
  rest = rest.substr(c1 + 1);
  const size_t c2 = rest.find(':');
  const std::string rank = rest.substr(0, c2);
  long long v = 0;
  if (rank != "*") {
    if (!parse_int(rank, 0, v)) fail(expected + ", RANK a rank or *");
    f.rank = static_cast<int>(v);
  }
  if (c2 == std::string::npos) return f;
  if (!parse_int(rest.substr(c2 + 1), 1, v)) fail(expected + ", STEP ≥ 1");
  f.step = v;
  return f;
}

// The older RANK:STEP variables.
void parse_legacy(const char* var, const char* value, FaultKind kind, std::vector<Fault>& out) {
  if (value == nullptr || *value == '\0') return;
  const std::string text = value;
  const size_t colon = text.find(':');
  long long r = 0, s = 0;
  if (colon == std::string::npos || !parse_int(text.substr(0, colon), 0, r) ||
      !parse_int(text.substr(colon + 1), 1, s))
    bad(var, text, "expected RANK:STEP");
  Fault f;
  f.kind = kind;
  f.point = FaultPoint::Step;
  f.rank = static_cast<int>(r);
  f.step = s;
  f.text = std::string(var) + "=" + text;
  out.push_back(f);
}

void announce(const Fault& f, int rank, int64_t step, const char* what) {
  if (f.point == FaultPoint::Step)
    std::fprintf(stderr, "hpctrain: rank %d: %s: %s as step %lld begins\n", rank, f.text.c_str(), what,
                 static_cast<long long>(step));
  else
    std::fprintf(stderr, "hpctrain: rank %d: %s: %s in %s, step %lld\n", rank, f.text.c_str(), what,
                 fault_point_name(f.point), static_cast<long long>(step));
  std::fflush(stderr);
}

}  // namespace

const char* fault_point_name(FaultPoint p) {
  switch (p) {
    case FaultPoint::Step:
      return "step";
    case FaultPoint::Backward:
      return "backward";
    case FaultPoint::Allreduce:
      return "allreduce";
    case FaultPoint::CkptWrite:
      return "ckpt_write";
    case FaultPoint::CkptClose:
      return "ckpt_close";
    case FaultPoint::CkptFsync:
      return "ckpt_fsync";
    case FaultPoint::CkptRename:
      return "ckpt_rename";
    case FaultPoint::Metrics:
      return "metrics";
    case FaultPoint::DataRead:
      return "data_read";
  }
  return "?";
}

const char* fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::Enospc:
      return "enospc";
    case FaultKind::Eio:
      return "eio";
    case FaultKind::Stall:
      return "stall";
    case FaultKind::Exit:
      return "exit";
    case FaultKind::SigUsr1:
      return "sigusr1";
    case FaultKind::SigTerm:
      return "sigterm";
    case FaultKind::SigInt:
      return "sigint";
  }
  return "?";
}

std::vector<Fault> parse_faults(const char* fault, const char* stall, const char* exit) {
  std::vector<Fault> out;
  if (fault != nullptr && *fault != '\0') {
    const std::string all = fault;
    size_t begin = 0;
    while (begin <= all.size()) {
      const size_t comma = std::min(all.find(',', begin), all.size());
      out.push_back(parse_one("HPCTRAIN_FAULT", all.substr(begin, comma - begin), all));
      begin = comma + 1;
    }
  }
  parse_legacy("HPCTRAIN_TEST_STALL", stall, FaultKind::Stall, out);
  parse_legacy("HPCTRAIN_TEST_EXIT", exit, FaultKind::Exit, out);
  return out;
}

void install_faults(std::vector<Fault> faults, int rank) {
  State& s = state();
  s.active.store(false);
  s.rank = rank;
  s.fired = std::make_unique<std::atomic<bool>[]>(faults.size());  // all false
  s.faults = std::move(faults);
  s.step.store(0);
  s.active.store(!s.faults.empty(), std::memory_order_release);
}

void clear_faults() { install_faults({}, -1); }

void set_fault_step(int64_t step) { state().step.store(step, std::memory_order_relaxed); }

int fault_at(FaultPoint point) {
  State& s = state();
  if (!s.active.load(std::memory_order_acquire)) return 0;
  const int64_t step = s.step.load(std::memory_order_relaxed);
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const Fault& f = s.faults[i];
    if (f.point != point || (f.rank >= 0 && f.rank != s.rank)) continue;
    if (is_io(f.kind)) {
      if (f.step > 0 && step < f.step) continue;
      if (!s.fired[i].exchange(true)) announce(f, s.rank, step, "failing I/O from here on");
      return f.kind == FaultKind::Enospc ? ENOSPC : EIO;
    }
    if ((f.step > 0 && step != f.step) || s.fired[i].exchange(true)) continue;
    switch (f.kind) {
      case FaultKind::Exit:
        announce(f, s.rank, step, "killing myself (SIGKILL)");
        std::raise(SIGKILL);
        break;
      case FaultKind::Stall:
        announce(f, s.rank, step, "no more collectives from here on");
        // The others' dist.timeout ends the job; the bound only keeps a forgotten process from living
        // forever.
        for (int t = 0; t < 3600; ++t) sleep(1);
        std::_Exit(EXIT_PEER);
      case FaultKind::SigUsr1:
        announce(f, s.rank, step, "raising SIGUSR1");
        std::raise(SIGUSR1);
        break;
      case FaultKind::SigTerm:
        announce(f, s.rank, step, "raising SIGTERM");
        std::raise(SIGTERM);
        break;
      case FaultKind::SigInt:
        announce(f, s.rank, step, "raising SIGINT");
        std::raise(SIGINT);
        break;
      default:
        break;
    }
  }
  return 0;
}

}  // namespace hpc::dist
