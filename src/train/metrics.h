// Machine-readable metrics: one JSON object per line in RUN_DIR/metrics.jsonl.
//
// Keys other tools rely on (docs/outputs.md): training records step, epoch,
// loss, lr, grad_norm, samples_per_s, data_ms, compute_ms, comm_ms;
// evaluation records step, epoch, val_loss, val_acc, val_top5. Accuracies
// are fractions in [0, 1] (the console prints percentages). Floats are written with
// 17 significant digits so a value read back is the value computed. A write
// failure (disk full) is reported once on stderr and does not stop training:
// the failed record is cut off again (no torn line) and left out, and when
// writing works again a note says how many records were lost.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace hpc::train {

// An ordered list of key → number, written as one JSON object.
class Record {
 public:
  Record& add(const std::string& key, double value);
  Record& add_int(const std::string& key, long long value);
  std::string json() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key, JSON-encoded value
};

class MetricsLog {
 public:
  MetricsLog() = default;
  // Appends to path (created if missing). An empty path makes a log that writes nothing.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& o) noexcept
      : f_(std::exchange(o.f_, nullptr)),
        path_(std::move(o.path_)),
        warned_(o.warned_),
        lost_(std::exchange(o.lost_, 0)) {}
  MetricsLog& operator=(MetricsLog&& o) noexcept {
    std::swap(f_, o.f_);
    std::swap(path_, o.path_);
    std::swap(warned_, o.warned_);
    std::swap(lost_, o.lost_);
    return *this;
  }

  void write(const Record& r);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  bool warned_ = false;
  long long lost_ = 0;  // records not written since the last one that was
};

// JSON string literal with escapes.
std::string json_quote(const std::string& s);

}  // namespace hpc::train
