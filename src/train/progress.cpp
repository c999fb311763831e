// Progress (see progress.h).
#include "train/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hpc::train {

std::string format_duration(double s) {
  char buf[32];
  long t = std::lround(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

namespace {
// A bar only where a person watches one process's terminal: Open MPI gives
// every rank a pseudo-terminal even when mpirun's own output is a file, so
// a multi-rank run is treated as a log.
bool wants_bar(ProgressStyle mode, int world) {
  if (mode == ProgressStyle::Bar) return true;
  if (mode != ProgressStyle::Auto || world > 1 || !isatty(STDOUT_FILENO)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::string(term) == "dumb");
}
}  // namespace

Progress::Progress(ProgressStyle mode, int64_t total_steps, int64_t first_step, bool is_root, int world)
    : root_(is_root),
      bar_(is_root && wants_bar(mode, world)),
      quiet_(mode == ProgressStyle::None),
      total_(total_steps),
      first_(first_step),
      start_(std::chrono::steady_clock::now()) {}

void Progress::flush() {
  errno = 0;
  if (std::fflush(stdout) == 0 || warned_) return;
  std::fprintf(stderr,
               "hpctrain: warning: cannot write the progress output (stdout: %s); training continues\n",
               std::strerror(errno ? errno : EIO));
  std::clearerr(stdout);
  warned_ = true;
}

void Progress::clear_bar() {
  if (bar_drawn_) std::printf("\r\033[2K");
  bar_drawn_ = false;
}

void Progress::table_header(const char* rate) {
  if (!root_ || quiet_) return;
  std::printf("%5s %8s %10s %10s %10s %11s %8s %10s %8s\n", "epoch", "step", "loss", "lr", "grad_norm", rate,
              "data_ms", "compute_ms", "comm_ms");
  flush();
}

void Progress::step_line(int64_t epoch, int64_t step, double loss, double lr, double grad_norm,
                         double samples_per_s, double data_ms, double compute_ms, double comm_ms) {
  if (!root_ || quiet_) return;
  clear_bar();
  std::printf("%5lld %8lld %10.4f %10.3e %10.4f %11.1f %8.2f %10.2f %8.2f\n", static_cast<long long>(epoch),
              static_cast<long long>(step), loss, lr, grad_norm, samples_per_s, data_ms, compute_ms, comm_ms);
  flush();
}

void Progress::eval_line(int64_t epoch, int64_t step, double val_loss, double val_acc, double val_top5) {
  if (!root_ || quiet_) return;
  clear_bar();
  if (val_top5 >= 0)
    std::printf("eval  epoch %lld step %lld: val_loss %.4f  val_acc %.2f%%  val_top5 %.2f%%\n",
                static_cast<long long>(epoch), static_cast<long long>(step), val_loss, 100 * val_acc,
                100 * val_top5);
  else
    std::printf("eval  epoch %lld step %lld: val_loss %.4f  val_acc %.2f%%\n", static_cast<long long>(epoch),
                static_cast<long long>(step), val_loss, 100 * val_acc);
  flush();
}

void Progress::tick(int64_t step) {
  if (!bar_) return;
  auto now = std::chrono::steady_clock::now();
  // Redrawing costs a write syscall: at most 10 times a second.
  if (step < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double frac = total_ > 0 ? static_cast<double>(step) / static_cast<double>(total_) : 1.0;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double done = static_cast<double>(step - first_);
  double eta = done > 0 ? elapsed / done * static_cast<double>(total_ - step) : 0;
  const int width = 30;
  int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar += std::string(static_cast<size_t>(width - filled), '.');
  std::printf("\r\033[2K[%s] %3d%%  step %lld/%lld  ETA %s", bar.c_str(), static_cast<int>(frac * 100),
              static_cast<long long>(step), static_cast<long long>(total_), format_duration(eta).c_str());
  flush();
  bar_drawn_ = true;
}

void Progress::line(const std::string& text) {
  if (!root_ || quiet_) return;
  clear_bar();
  std::printf("%s\n", text.c_str());
  flush();
}

void Progress::done() { clear_bar(); }

}  // namespace hpc::train
