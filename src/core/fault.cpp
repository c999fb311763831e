// Test-only fault injection (see fault.h for the grammar and why the plan
// is process-wide).
#include "core/fault.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/check.h"
#include "core/error.h"

namespace hpc {

namespace {

constexpr const char* VARIABLE = "HPCTRAIN_FAULT";

struct KindName {
  FaultKind kind;
  const char* name;
};
constexpr KindName KINDS[] = {
    {FaultKind::Enospc, "enospc"}, {FaultKind::Eio, "eio"},         {FaultKind::Stall, "stall"},
    {FaultKind::Exit, "exit"},     {FaultKind::SigUsr1, "sigusr1"}, {FaultKind::SigTerm, "sigterm"},
    {FaultKind::SigInt, "sigint"}, {FaultKind::Sleep, "sleep"},     {FaultKind::Lesser, "lesser"},
    {FaultKind::Wrong, "wrong"},   {FaultKind::Abort, "abort"},     {FaultKind::Segv, "segv"}};

struct PointName {
  FaultPoint point;
  const char* name;
};
constexpr PointName POINTS[] = {{FaultPoint::Step, "step"},
                                {FaultPoint::StepEnd, "step_end"},
                                {FaultPoint::Backward, "backward"},
                                {FaultPoint::Allreduce, "allreduce"},
                                {FaultPoint::Allgather, "allgather"},
                                {FaultPoint::CkptWrite, "ckpt_write"},
                                {FaultPoint::CkptClose, "ckpt_close"},
                                {FaultPoint::CkptFsync, "ckpt_fsync"},
                                {FaultPoint::CkptRename, "ckpt_rename"},
                                {FaultPoint::Metrics, "metrics"},
                                {FaultPoint::DataRead, "data_read"},
                                {FaultPoint::RingSend, "ring_send"},
                                {FaultPoint::Startup, "startup"},
                                {FaultPoint::BlasCore, "blas_core"},
                                {FaultPoint::BlasCheck, "blas_check"}};

bool is_signal(FaultKind k) {
  return k == FaultKind::SigUsr1 || k == FaultKind::SigTerm || k == FaultKind::SigInt ||
         k == FaultKind::Abort || k == FaultKind::Segv;
}
bool is_io(FaultKind k) { return k == FaultKind::Enospc || k == FaultKind::Eio; }
// Faults that stay on from their step; the others fire once.
bool is_persistent(FaultKind k) { return is_io(k) || k == FaultKind::Sleep; }

// The kinds each point can take: only what the code at that point can suffer.
bool allowed(FaultKind k, FaultPoint p) {
  switch (p) {
    case FaultPoint::Step:
    case FaultPoint::StepEnd:
      return k == FaultKind::Stall || k == FaultKind::Exit || k == FaultKind::Sleep || is_signal(k);
    case FaultPoint::Backward:
    case FaultPoint::Allreduce:
      return is_signal(k);
    case FaultPoint::Allgather:
      return k == FaultKind::Exit || k == FaultKind::Stall || is_signal(k);
    case FaultPoint::CkptWrite:
      return k == FaultKind::Enospc || k == FaultKind::Exit || k == FaultKind::Sleep || is_signal(k);
    case FaultPoint::CkptClose:
    case FaultPoint::CkptFsync:
    case FaultPoint::CkptRename:
    case FaultPoint::Metrics:
      return k == FaultKind::Enospc;
    case FaultPoint::DataRead:
      return k == FaultKind::Eio || k == FaultKind::Sleep;
    case FaultPoint::RingSend:
      return k == FaultKind::Sleep;
    case FaultPoint::Startup:  // a crash before training: what a requeued job must survive
      return k == FaultKind::Exit || k == FaultKind::Abort || k == FaultKind::Segv;
    case FaultPoint::BlasCore:
      return k == FaultKind::Lesser;
    case FaultPoint::BlasCheck:
      return k == FaultKind::Wrong;
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
      fired;  // one per fault: one-shot faults fire once, the others log once
};

State& state() {
  static State s;  // the one mutable global of the hook (see the header)
  return s;
}

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw UserError(std::string(VARIABLE) + "='" + text + "': " + why +
                  " (test-only fault injection; see src/core/fault.h)");
}

bool parse_int(const std::string& s, long long lo, long long& out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  out = std::atoll(s.c_str());
  return out >= lo;
}

std::string kind_list() {
  std::string s;
  for (const KindName& k : KINDS) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s + "=MS";
}

std::string point_list() {
  std::string s;
  for (const PointName& p : POINTS) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

// One KIND@POINT[:RANK[:STEP]] item of `whole` (what an error message quotes).
Fault parse_one(const std::string& text, const std::string& whole) {
  const std::string expected = "expected KIND@POINT[:RANK[:STEP]]";
  auto fail = [&](const std::string& why) { bad(whole, (text == whole ? "" : "in '" + text + "': ") + why); };
  const size_t at = text.find('@');
  if (at == std::string::npos) fail(expected);
  Fault f;
  f.text = std::string(VARIABLE) + "=" + text;
  std::string kind = text.substr(0, at);
  const size_t eq = kind.find('=');
  const std::string argument = eq == std::string::npos ? "" : kind.substr(eq + 1);
  if (eq != std::string::npos) kind.resize(eq);
  const auto k =
      std::find_if(std::begin(KINDS), std::end(KINDS), [&](const KindName& n) { return kind == n.name; });
  if (k == std::end(KINDS)) fail("unknown kind '" + kind + "' (" + kind_list() + ")");
  f.kind = k->kind;
  long long v = 0;
  if (f.kind == FaultKind::Sleep) {
    if (!parse_int(argument, 1, v)) fail("sleep takes milliseconds: sleep=MS with MS ≥ 1");
    f.sleep_ms = v;
  } else if (eq != std::string::npos) {
    fail("'" + kind + "' takes no '=' argument");
  }
  std::string rest = text.substr(at + 1);
  const size_t c1 = rest.find(':');
  const std::string point = rest.substr(0, c1);
  const auto p =
      std::find_if(std::begin(POINTS), std::end(POINTS), [&](const PointName& n) { return point == n.name; });
  if (p == std::end(POINTS)) fail("unknown point '" + point + "' (" + point_list() + ")");
  f.point = p->point;
  if (!allowed(f.kind, f.point)) fail("'" + kind + "' cannot happen at '" + point + "'");
  if (c1 == std::string::npos) return f;
  rest = rest.substr(c1 + 1);
  const size_t c2 = rest.find(':');
  const std::string rank = rest.substr(0, c2);
  if (rank != "*") {
    if (!parse_int(rank, 0, v)) fail(expected + ", RANK a rank or *");
    f.rank = static_cast<int>(v);
  }
  if (c2 == std::string::npos) return f;
  if (!parse_int(rest.substr(c2 + 1), 1, v)) fail(expected + ", STEP ≥ 1");
  f.step = v;
  return f;
}

void announce(const Fault& f, int rank, int64_t step, const char* what) {
  if (f.point == FaultPoint::Startup)
    std::fprintf(stderr, "hpctrain: rank %d: %s: %s at start-up (start %lld of the job)\n", rank,
                 f.text.c_str(), what, static_cast<long long>(step));
  else if (f.point == FaultPoint::Step)
    std::fprintf(stderr, "hpctrain: rank %d: %s: %s as step %lld begins\n", rank, f.text.c_str(), what,
                 static_cast<long long>(step));
  else
    std::fprintf(stderr, "hpctrain: rank %d: %s: %s in %s, step %lld\n", rank, f.text.c_str(), what,
                 fault_point_name(f.point), static_cast<long long>(step));
  std::fflush(stderr);
}

void raise_signal(const Fault& f, int rank, int64_t step, int signo, const char* what) {
  announce(f, rank, step, what);
  std::raise(signo);
}

}  // namespace

const char* fault_point_name(FaultPoint p) {
  for (const PointName& n : POINTS)
    if (n.point == p) return n.name;
  return "?";
}

std::vector<Fault> parse_faults(const char* value) {
  std::vector<Fault> out;
  if (value == nullptr || *value == '\0') return out;
  const std::string all = value;
  size_t begin = 0;
  while (begin <= all.size()) {
    const size_t comma = std::min(all.find(',', begin), all.size());
    out.push_back(parse_one(all.substr(begin, comma - begin), all));
    begin = comma + 1;
  }
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

namespace {
thread_local int64_t scoped_fault_step = -1;  // FaultStepScope's step on this thread; -1: none
}  // namespace

FaultStepScope::FaultStepScope(int64_t step) { scoped_fault_step = step; }
FaultStepScope::~FaultStepScope() { scoped_fault_step = -1; }

int64_t job_start_number() {
  const char* restarts = std::getenv("SLURM_RESTART_COUNT");
  long long n = 0;
  return restarts != nullptr && parse_int(restarts, 0, n) ? n + 1 : 1;
}

int fault_at(FaultPoint point) {
  State& s = state();
  if (!s.active.load(std::memory_order_acquire)) return 0;
  const int64_t step = point == FaultPoint::Startup ? job_start_number()
                       : scoped_fault_step >= 0     ? scoped_fault_step
                                                    : s.step.load(std::memory_order_relaxed);
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const Fault& f = s.faults[i];
    if (f.point != point || (f.rank >= 0 && f.rank != s.rank)) continue;
    if (is_persistent(f.kind)) {
      if (f.step > 0 && step < f.step) continue;
      if (f.kind == FaultKind::Sleep) {
        if (!s.fired[i].exchange(true)) announce(f, s.rank, step, "sleeping there from here on");
        std::this_thread::sleep_for(std::chrono::milliseconds(f.sleep_ms));
        continue;
      }
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
        raise_signal(f, s.rank, step, SIGUSR1, "raising SIGUSR1");
        break;
      case FaultKind::SigTerm:
        raise_signal(f, s.rank, step, SIGTERM, "raising SIGTERM");
        break;
      case FaultKind::SigInt:
        raise_signal(f, s.rank, step, SIGINT, "raising SIGINT");
        break;
      case FaultKind::Abort:
        announce(f, s.rank, step, "calling abort() (SIGABRT)");
        std::abort();
      case FaultKind::Segv:
        announce(f, s.rank, step, "crashing (SIGSEGV)");
        // A handler runs first (Open MPI's banner, the flight record). If it returns, as one
        // written for a real fault does (the faulting instruction runs again, now without it),
        // the default action ends the process.
        std::raise(SIGSEGV);
        std::signal(SIGSEGV, SIG_DFL);
        std::raise(SIGSEGV);
        break;
      default:
        break;
    }
  }
  return 0;
}

bool fault_planned(FaultKind kind, FaultPoint point) {
  std::vector<Fault> faults;
  try {
    faults = parse_faults(std::getenv(VARIABLE));
  } catch (const UserError&) {
    return false;
  }
  const int rank = launcher_rank();
  return std::any_of(faults.begin(), faults.end(), [&](const Fault& f) {
    return f.kind == kind && f.point == point && (f.rank < 0 || f.rank == std::max(rank, 0));
  });
}

}  // namespace hpc
