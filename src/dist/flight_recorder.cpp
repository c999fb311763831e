// The collective flight recorder: see flight_recorder.h.
#include "dist/flight_recorder.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "dist/heartbeat.h"

namespace hpc::dist {

namespace {

std::atomic<int> usr2_received{0};
extern "C" void on_flight_signal(int) { usr2_received.store(1); }

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\')
      out += '\\', out += ch;
    else if (static_cast<unsigned char>(ch) < 0x20)
      out += ' ';
    else
      out += ch;
  }
  return out;
}

const char* state_name(FlightRecorder::State s) {
  return s == FlightRecorder::State::Completed ? "completed" : "started";
}

}  // namespace

void install_flight_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_flight_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

bool flight_signal_pending() { return usr2_received.exchange(0) != 0; }

void FlightRecorder::started(uint64_t seq, CollOp op, int64_t count, DType dtype, const char* comm,
                             int64_t step, GroupKind group, int peer) {
  const double now = monotonic_seconds();
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = ring_[recorded_ % CAPACITY];
  ++recorded_;
  e = Entry{
      seq,      static_cast<int32_t>(op), State::Started, count, dtype, comm, step, now, now, 0, group, peer,
      recorded_};
}

void FlightRecorder::completed(uint64_t seq, GroupKind group, CollOp p2p, int peer) {
  const double now = monotonic_seconds();
  std::lock_guard<std::mutex> lock(mu_);
  // The newest entries first: a collective completes soon after it starts.
  const uint64_t n = recorded_ < CAPACITY ? recorded_ : CAPACITY;
  const bool message = is_p2p(p2p);
  for (uint64_t i = 1; i <= n; ++i) {
    Entry& e = ring_[(recorded_ - i) % CAPACITY];
    if (e.seq != seq || e.group != group || is_p2p(static_cast<CollOp>(e.op)) != message) continue;
    if (message && (e.op != static_cast<int32_t>(p2p) || e.peer != peer)) continue;
    e.state = State::Completed;
    e.end_s = now;
    return;
  }
}

std::vector<FlightRecorder::Entry> FlightRecorder::completed_after(uint64_t order) {
  std::vector<Entry> out;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t n = recorded_ < CAPACITY ? recorded_ : CAPACITY;
  for (uint64_t i = recorded_ - n; i < recorded_; ++i) {
    const Entry& e = ring_[i % CAPACITY];
    if (e.order > order && e.state == State::Completed) out.push_back(e);
  }
  return out;
}

void FlightRecorder::set_group_name(GroupKind kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = group_names_[static_cast<size_t>(kind)];
  std::snprintf(slot.data(), slot.size(), "%s", json_escape(name).c_str());
}

std::string FlightRecorder::group_name(GroupKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& slot = group_names_[static_cast<size_t>(kind)];
  return slot[0] != '\0' ? std::string(slot.data()) : std::string(group_kind_name(kind));
}

void FlightRecorder::set_path(const std::string& path, int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(dump_mu_);
  path_ = path, rank_ = rank, host_ = host;
  auto c_string = [](const std::string& text) {
    return std::vector<char>(text.c_str(), text.c_str() + text.size() + 1);
  };
  sig_path_ = c_string(path);
  sig_tmp_ = c_string(path + ".tmp-" + std::to_string(::getpid()));
  sig_host_ = c_string(json_escape(host));
  sig_text_.assign(1024 + CAPACITY * 640, '\0');
}

std::string FlightRecorder::to_json(const std::string& reason) {
  std::array<Entry, CAPACITY> copy;
  uint64_t recorded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy = ring_;
    recorded = recorded_;
  }
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"format\": \"hpctrain-flight-1\", \"rank\": %d, \"host\": \"%s\", \"pid\": %d, "
                "\"reason\": \"%s\", \"dumped_unix\": %.6f, \"dumped_monotonic_s\": %.6f, "
                "\"recorded\": %" PRIu64 ", \"entries\": [\n",
                rank_, json_escape(host_).c_str(), static_cast<int>(::getpid()), json_escape(reason).c_str(),
                static_cast<double>(std::time(nullptr)), monotonic_seconds(), recorded);
  std::string out = head;
  const uint64_t n = recorded < CAPACITY ? recorded : CAPACITY;
  for (uint64_t i = recorded - n; i < recorded; ++i) {  // oldest first
    const Entry& e = copy[i % CAPACITY];
    char peer[32] = "";
    if (is_p2p(static_cast<CollOp>(e.op))) std::snprintf(peer, sizeof peer, ", \"peer\": %d", e.peer);
    char line[512];
    std::snprintf(line, sizeof line,
                  "  {\"seq\": %" PRIu64 ", \"group\": \"%s\", \"op\": \"%s\"%s, \"count\": %" PRId64
                  ", \"dtype\": \"%s\", \"comm\": \"%s\", \"step\": %" PRId64
                  ", \"enqueue_s\": %.6f, \"start_s\": %.6f, \"end_s\": %.6f, \"state\": \"%s\"}%s\n",
                  e.seq, group_name(e.group).c_str(), coll_op_name(static_cast<CollOp>(e.op)), peer, e.count,
                  dtype_name(e.dtype), e.comm, e.step, e.enqueue_s, e.start_s, e.end_s, state_name(e.state),
                  i + 1 < recorded ? "," : "");
    out += line;
  }
  out += "]}\n";
  return out;
}

bool FlightRecorder::dump(const std::string& reason) {
  std::lock_guard<std::mutex> lock(dump_mu_);
  if (path_.empty()) return false;
  const std::string tmp = path_ + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << to_json(reason);
    if (!f.flush()) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace hpc::dist
