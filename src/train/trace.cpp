// The per-rank timeline: see trace.h.
#include "train/trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "dist/heartbeat.h"
#include "dist/nvtx.h"

namespace hpc::train {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
  }
  return out;
}

bool parse_steps(const std::string& text, int64_t& a, int64_t& b) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  try {
    size_t n1 = 0, n2 = 0;
    a = std::stoll(text.substr(0, colon), &n1);
    b = std::stoll(text.substr(colon + 1), &n2);
    return n1 == colon && n2 == text.size() - colon - 1 && a >= 1 && b >= a;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

Tracer::Tracer(std::string file, const std::string& steps, int rank) : file_(std::move(file)), rank_(rank) {
  if (!parse_steps(steps, first_, last_))
    throw UserError("--log.trace_steps '" + steps + "': expected A:B with 1 <= A <= B (steps, 1-based)");
}

void Tracer::start(double now) { origin_ = now; }

void Tracer::set_step(int64_t step) {
  end_step();
  step_ = step, on_ = enabled() && step >= first_ && step <= last_;
  if (!on_) return;
  const std::string name = "step " + std::to_string(step);
  dist::nvtx_push(name.c_str());
  nvtx_depth_ = 1;
}

void Tracer::phase(const char* name) {
  if (nvtx_depth_ == 0) return;
  if (nvtx_depth_ == 2) dist::nvtx_pop();
  nvtx_depth_ = 1;
  if (name == nullptr) return;
  dist::nvtx_push(name);
  nvtx_depth_ = 2;
}

void Tracer::end_step() {
  for (; nvtx_depth_ > 0; --nvtx_depth_) dist::nvtx_pop();
}

Tracer::Range::Range(const Tracer& t, const char* name) : open_(t.on()) {
  if (open_) dist::nvtx_push(name);
}

Tracer::Range::~Range() {
  if (open_) dist::nvtx_pop();
}

void Tracer::span(const char* cat, const std::string& name, double t0, double t1, int tid) {
  if (!on_) return;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "\"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": %d, "
                "\"args\": {\"step\": %" PRId64 "}}",
                cat, 1e6 * (t0 - origin_), 1e6 * (t1 > t0 ? t1 - t0 : 0), rank_, tid, step_);
  if (!events_.empty()) events_ += ",\n";
  events_ += "{\"name\": \"" + escape(name) + "\", " + buf;
}

void Tracer::span_of(int64_t step, const char* cat, const std::string& name, double t0, double t1, int tid) {
  if (!traces(step)) return;
  const int64_t now_step = step_;
  const bool now_on = on_;
  step_ = step, on_ = true;
  span(cat, name, t0, t1, tid);
  step_ = now_step, on_ = now_on;
}

void Tracer::take_collectives(dist::FlightRecorder& flight) {
  if (!enabled()) return;
  for (const dist::FlightRecorder::Entry& e : flight.completed_after(taken_order_)) {
    taken_order_ = e.order > taken_order_ ? e.order : taken_order_;
    if (!traces(e.step)) continue;
    const auto op = static_cast<dist::CollOp>(e.op);
    std::string group = e.group == dist::GroupKind::World ? "" : " of " + flight.group_name(e.group);
    if (op == dist::CollOp::Send || op == dist::CollOp::Recv)  // a message: its other end (world rank)
      group = (op == dist::CollOp::Send ? " to rank " : " from rank ") + std::to_string(e.peer) + group;
    char name[224];
    std::snprintf(name, sizeof name, "%s #%" PRIu64 "%s (%" PRId64 " %s, %s)", dist::coll_op_name(op), e.seq,
                  group.c_str(), e.count, dtype_name(e.dtype), e.comm);
    span_of(e.step, "comm", name, e.start_s, e.end_s, 1);
  }
}

std::string Tracer::finish(dist::Communicator& comm, const std::string& host) {
  if (!enabled() || finished_) return "";
  finished_ = true;
  end_step();
  on_ = false;
  const std::string mine = host + "\n" + events_;
  // Two allgathers: the lengths, then every rank's text padded to the longest.
  const int world = comm.size();
  double len = static_cast<double>(mine.size());
  Tensor lens(Shape{world}, DType::F64);
  comm.allgather(Tensor::borrow(&len, Shape{1}, DType::F64), lens);
  int64_t longest = 1;
  for (int r = 0; r < world; ++r)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(lens.data<double>()[r]));
  std::string padded = mine;
  padded.resize(static_cast<size_t>(longest), ' ');
  Tensor all(Shape{world * longest}, DType::U8);
  comm.allgather(Tensor::borrow(padded.data(), Shape{longest}, DType::U8), all);
  if (comm.rank() != 0) return "";
  std::vector<std::string> events, hosts;
  const char* base = static_cast<const char*>(all.raw());
  for (int r = 0; r < world; ++r) {
    const std::string text(base + r * longest, static_cast<size_t>(lens.data<double>()[r]));
    const size_t nl = text.find('\n');
    hosts.push_back(text.substr(0, nl));
    events.push_back(nl == std::string::npos ? "" : text.substr(nl + 1));
  }
  const std::string tmp = file_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << chrome_trace_json(events, hosts);
    if (!out.flush()) {
      std::remove(tmp.c_str());
      throw UserError("cannot write the trace " + file_);
    }
  }
  if (std::rename(tmp.c_str(), file_.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw UserError("cannot write the trace " + file_);
  }
  return file_;
}

std::string chrome_trace_json(const std::vector<std::string>& per_rank,
                              const std::vector<std::string>& hosts) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& e) {
    if (e.empty()) return;
    out += first ? "" : ",\n";
    out += e;
    first = false;
  };
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const std::string pid = std::to_string(r);
    add("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
        ", \"tid\": 0, \"args\": {\"name\": \"rank " + pid + " (" + escape(r < hosts.size() ? hosts[r] : "") +
        ")\"}}");
    add("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
        ", \"tid\": 0, \"args\": {\"sort_index\": " + pid + "}}");
    const char* threads[] = {"trainer", "collectives", "checkpoint writer"};
    for (int t = 0; t < 3; ++t)
      add("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + std::to_string(t) +
          ", \"args\": {\"name\": \"" + threads[t] + "\"}}");
    add(per_rank[r]);
  }
  out += "\n]}\n";
  return out;
}

}  // namespace hpc::train
