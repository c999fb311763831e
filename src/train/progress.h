// What a person watching the run sees (rank 0 only): a fixed-column step
// table, one evaluation line per epoch, and on a terminal a progress bar
// with ETA that redraws in place. In a Slurm log (not a TTY) only plain lines
// are written, so the log stays readable with `less`.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "config/config.h"

namespace hpc::train {

class Progress {
 public:
  // mode: auto (a bar when one process writes to a terminal) | bar | plain | none.
  // Only the root prints.
  Progress(ProgressStyle mode, int64_t total_steps, int64_t first_step, bool is_root, int world);

  // rate: the unit of the throughput column ("samples/s"; a language model: "tokens/s").
  void table_header(const char* rate = "samples/s");
  void step_line(int64_t epoch, int64_t step, double loss, double lr, double grad_norm, double samples_per_s,
                 double data_ms, double compute_ms, double comm_ms);
  void eval_line(int64_t epoch, int64_t step, double val_loss, double val_acc, double val_top5);
  // Redraws the bar after each step (bar mode only).
  void tick(int64_t step);
  void line(const std::string& text);  // any other line, keeping the bar intact
  void done();

 private:
  void clear_bar();
  // fflush(stdout); a failure (a Slurm log on a full disk) is reported once
  // on stderr and otherwise ignored: the run must not die of its log.
  void flush();
  bool root_, bar_, quiet_;
  bool warned_ = false;
  int64_t total_, first_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

}  // namespace hpc::train
