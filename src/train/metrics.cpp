// MetricsLog and Record (see metrics.h).
#include "train/metrics.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fault.h"

namespace hpc::train {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

Record& Record::add(const std::string& key, double value) {
  char buf[40];
  if (std::isfinite(value))
    std::snprintf(buf, sizeof buf, "%.17g", value);
  else
    std::snprintf(buf, sizeof buf, "%s", std::isnan(value) ? "NaN" : (value > 0 ? "Infinity" : "-Infinity"));
  fields_.emplace_back(key, buf);  // NaN/Infinity: not strict JSON, but what pandas and Python's json read
  return *this;
}

Record& Record::add_int(const std::string& key, long long value) {
  fields_.emplace_back(key, std::to_string(value));
  return *this;
}

std::string Record::json() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i)
    s += (i ? ", " : "") + json_quote(fields_[i].first) + ": " + fields_[i].second;
  return s + "}";
}

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw UserError("cannot open " + path + " for writing: " + std::strerror(errno));
  // Unbuffered: a record that fails to write must not linger in a buffer and
  // come out later, torn, in front of the next one.
  std::setvbuf(f_, nullptr, _IONBF, 0);
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const Record& r) {
  if (!f_) return;
  std::string line = r.json() + "\n";
  // Written through per record: a job killed by the scheduler keeps every line it wrote.
  struct stat before {};
  const bool sized = ::fstat(::fileno(f_), &before) == 0;
  errno = 0;
  int err = fault_at(FaultPoint::Metrics);  // test-only: a full disk (ENOSPC)
  if (err == 0 && std::fwrite(line.data(), 1, line.size(), f_) != line.size()) err = errno ? errno : EIO;
  if (err == 0) {
    if (lost_ > 0)
      std::fprintf(stderr,
                   "hpctrain: note: %s can be written again; %lld record(s) before this one were lost\n",
                   path_.c_str(), static_cast<long long>(lost_));
    lost_ = 0;
    return;
  }
  // Cut a torn record off again, so that every line stays one whole JSON object.
  // (If even that fails, nothing more can be done here.)
  [[maybe_unused]] const bool cut = sized && ::ftruncate(::fileno(f_), before.st_size) == 0;
  std::clearerr(f_);
  ++lost_;
  if (!warned_)
    std::fprintf(
        stderr,
        "hpctrain: warning: cannot write %s (%s): training continues; records that cannot be written "
        "are left out\n",
        path_.c_str(), std::strerror(err));
  warned_ = true;
}

}  // namespace hpc::train
