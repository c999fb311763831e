// The flight record on a fatal signal: see flight_recorder.h.
//
// Everything the handler calls is async-signal-safe: clock_gettime, open,
// write, close, rename, raise, and this file's own formatting into a buffer
// set_path allocated (snprintf is not on POSIX's list, so it is not used).
// The ring is read without its mutex: the crashing thread may hold it, and
// a torn entry in a post-mortem beats a handler that deadlocks.
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <iterator>
#include <vector>

#include "dist/flight_recorder.h"
#include "dist/heartbeat.h"

namespace hpc::dist {

namespace {

// Appends to a fixed buffer; what does not fit is dropped (the buffer holds the largest record).
struct Text {
  char* p;
  char* end;
  void str(const char* s) {
    while (*s != '\0' && p < end) *p++ = *s++;
  }
  void u64(uint64_t v) {
    char digits[24];
    int n = 0;
    do digits[n++] = static_cast<char>('0' + v % 10), v /= 10;
    while (v != 0);
    while (n > 0 && p < end) *p++ = digits[--n];
  }
  void i64(int64_t v) {
    if (v < 0) str("-");
    u64(v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
  }
  void fixed6(double v) {  // "%.6f" for the clocks' values (finite, below 2^64 / 1e6)
    if (!(v == v) || v > 1.8e13 || v < -1.8e13) v = 0;
    if (v < 0) str("-"), v = -v;
    uint64_t whole = static_cast<uint64_t>(v);
    uint64_t micro = static_cast<uint64_t>(std::lround((v - static_cast<double>(whole)) * 1e6));
    if (micro >= 1000000) ++whole, micro -= 1000000;
    u64(whole);
    str(".");
    for (uint64_t d = 100000; d > 0; d /= 10) {
      const char digit[2] = {static_cast<char>('0' + micro / d % 10), '\0'};
      str(digit);
    }
  }
};

double clock_s(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::atomic<FlightRecorder*> fatal_recorder{nullptr};
std::atomic<bool> fatal_seen{false};

const char* fatal_reason(int signo) {
  switch (signo) {
    case SIGSEGV:
      return "signal SIGSEGV";
    case SIGBUS:
      return "signal SIGBUS";
    case SIGFPE:
      return "signal SIGFPE";
    case SIGILL:
      return "signal SIGILL";
    case SIGABRT:
      return "signal SIGABRT";
  }
  return "fatal signal";
}

constexpr int FATAL_SIGNALS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction previous_actions[std::size(FATAL_SIGNALS)];

extern "C" void on_fatal_signal(int signo) {
  // The first fatal signal writes the file; any other thread's goes straight on to the previous action.
  if (!fatal_seen.exchange(true)) {
    FlightRecorder* r = fatal_recorder.load();
    if (r != nullptr) r->dump_in_signal(fatal_reason(signo));
  }
  // The action that was there before (the default, Open MPI's backtrace, a sanitizer's report) takes
  // over; SA_NODEFER left the signal unblocked, so this raise reaches it at once and, for the default,
  // ends the process with the signal's own status (core dump included).
  for (size_t i = 0; i < std::size(FATAL_SIGNALS); ++i)
    if (FATAL_SIGNALS[i] == signo) sigaction(signo, &previous_actions[i], nullptr);
  raise(signo);
}

}  // namespace

bool FlightRecorder::dump_in_signal(const char* reason) noexcept {
  if (sig_path_.empty() || sig_text_.empty()) return false;
  Text t{sig_text_.data(), sig_text_.data() + sig_text_.size()};
  const uint64_t recorded = recorded_;
  t.str("{\"format\": \"hpctrain-flight-1\", \"rank\": ");
  t.i64(rank_);
  t.str(", \"host\": \"");
  t.str(sig_host_.data());
  t.str("\", \"pid\": ");
  t.i64(::getpid());
  t.str(", \"reason\": \"");
  t.str(reason);
  t.str("\", \"dumped_unix\": ");
  t.fixed6(static_cast<double>(static_cast<int64_t>(clock_s(CLOCK_REALTIME))));
  t.str(", \"dumped_monotonic_s\": ");
  t.fixed6(clock_s(CLOCK_MONOTONIC));
  t.str(", \"recorded\": ");
  t.u64(recorded);
  t.str(", \"entries\": [\n");
  const uint64_t n = recorded < CAPACITY ? recorded : CAPACITY;
  for (uint64_t i = recorded - n; i < recorded; ++i) {  // oldest first, as to_json
    const Entry& e = ring_[i % CAPACITY];
    t.str("  {\"seq\": ");
    t.u64(e.seq);
    t.str(", \"group\": \"");
    const auto& group = group_names_[static_cast<size_t>(e.group)];
    t.str(group[0] != '\0' ? group.data() : group_kind_name(e.group));
    t.str("\", \"op\": \"");
    t.str(coll_op_name(static_cast<CollOp>(e.op)));
    if (is_p2p(static_cast<CollOp>(e.op))) {
      t.str("\", \"peer\": ");
      t.i64(e.peer);
      t.str(", \"count\": ");
    } else {
      t.str("\", \"count\": ");
    }
    t.i64(e.count);
    t.str(", \"dtype\": \"");
    t.str(dtype_name(e.dtype));
    t.str("\", \"comm\": \"");
    t.str(e.comm);
    t.str("\", \"step\": ");
    t.i64(e.step);
    t.str(", \"enqueue_s\": ");
    t.fixed6(e.enqueue_s);
    t.str(", \"start_s\": ");
    t.fixed6(e.start_s);
    t.str(", \"end_s\": ");
    t.fixed6(e.end_s);
    t.str(e.state == State::Completed ? ", \"state\": \"completed\"}" : ", \"state\": \"started\"}");
    t.str(i + 1 < recorded ? ",\n" : "\n");
  }
  t.str("]}\n");
  const int fd = ::open(sig_tmp_.data(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const char* p = sig_text_.data();
  bool ok = true;
  while (ok && p < t.p) {
    const ssize_t w = ::write(fd, p, static_cast<size_t>(t.p - p));
    if (w > 0)
      p += w;
    else if (w < 0 && errno == EINTR)
      continue;
    else
      ok = false;
  }
  ok = ::close(fd) == 0 && ok;
  if (ok && ::rename(sig_tmp_.data(), sig_path_.data()) == 0) return true;
  ::unlink(sig_tmp_.data());
  return false;
}

void install_fatal_signal_dump(FlightRecorder& recorder) {
  fatal_recorder.store(&recorder);
  static bool installed = false;
  if (installed) return;
  installed = true;
  // An alternate stack for this thread, so a stack overflow's SIGSEGV can still run the handler.
  static std::vector<char> alt_stack(static_cast<size_t>(SIGSTKSZ) * 4 + 65536);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_NODEFER | SA_ONSTACK;
  for (size_t i = 0; i < std::size(FATAL_SIGNALS); ++i)
    sigaction(FATAL_SIGNALS[i], &sa, &previous_actions[i]);
}

}  // namespace hpc::dist
