// MetricsLog and Record (see metrics.h).
#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace hpc::train {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
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

Record& Record::add_str(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, json_quote(value));
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
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const Record& r) {
  if (!f_) return;
  std::string line = r.json() + "\n";
  // Flushed per record: a job killed by the scheduler keeps every line it wrote.
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    if (!warned_)
      std::fprintf(stderr, "hpctrain: warning: writing %s failed (%s); training continues without metrics\n",
                   path_.c_str(), std::strerror(errno));
    warned_ = true;
    std::clearerr(f_);
  }
}

}  // namespace hpc::train
