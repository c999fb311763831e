// Stop signals and the run's deadline (see signals.h).
#include "train/signals.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>

#include "train/progress.h"

namespace hpc::train {

namespace {

// A mutable global, because a signal handler can reach nothing else. A
// lock-free atomic is async-signal-safe; the first signal wins.
std::atomic<int> stop_signal_received{0};
static_assert(std::atomic<int>::is_always_lock_free);

constexpr int STOP_SIGNALS[] = {SIGUSR1, SIGTERM};
static_assert(std::size(STOP_SIGNALS) == 2, "StopSignals::previous_ holds one action per signal");

extern "C" void on_stop_signal(int signo) {
  int none = 0;
  stop_signal_received.compare_exchange_strong(none, signo);
}

}  // namespace

StopSignals::StopSignals(bool restore) : restore_(restore) {
  stop_signal_received.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a checkpoint write interrupted by a second signal continues.
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(STOP_SIGNALS); ++i) sigaction(STOP_SIGNALS[i], &sa, &previous_[i]);
}

StopSignals::~StopSignals() {
  if (!restore_) return;
  for (size_t i = 0; i < std::size(STOP_SIGNALS); ++i) sigaction(STOP_SIGNALS[i], &previous_[i], nullptr);
}

int StopSignals::received() const { return stop_signal_received.load(); }

std::string StopSignals::name(int signo) {
  switch (signo) {
    case SIGUSR1:
      return "SIGUSR1";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(signo);
  }
}

Deadline::Deadline(double time_limit_s, const char* job_end, Clock::time_point start, double now_unix) {
  auto consider = [&](double seconds_from_start, std::string why) {
    const Clock::time_point t = start + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(seconds_from_start));
    if (!active_ || t < deadline_) deadline_ = t, source_ = std::move(why);
    active_ = true;
  };
  if (time_limit_s > 0) consider(time_limit_s, "train.time_limit (" + format_duration(time_limit_s) + ")");
  if (job_end && *job_end) {
    char* end = nullptr;
    const long long t = std::strtoll(job_end, &end, 10);
    if (*end == '\0' && t > 0)
      consider(static_cast<double>(t) - now_unix - SLURM_END_MARGIN_S,
               "the Slurm job's end (SLURM_JOB_END_TIME) less " + format_duration(SLURM_END_MARGIN_S));
  }
}

double Deadline::seconds_left(Clock::time_point now) const {
  return active_ ? std::chrono::duration<double>(deadline_ - now).count() : 1e300;
}

void Deadline::add_interval(double seconds, bool with_eval) {
  if (with_eval) {
    eval_s_ = std::max(0.0, seconds - step_s_);
    return;
  }
  // The slowest recent step weighs most: a slow step right before the
  // deadline is the one that matters. Decays so that one hiccup is forgotten.
  step_s_ = std::max(seconds, 0.9 * step_s_ + 0.1 * seconds);
}

bool Deadline::next_would_pass(bool next_has_eval, Clock::time_point now) const {
  if (!active_) return false;
  const double need = 1.5 * (step_s_ + (next_has_eval ? eval_s_ : 0) + save_s_) + SLACK_S;
  return need >= seconds_left(now);
}

}  // namespace hpc::train
