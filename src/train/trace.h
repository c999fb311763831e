// Tracer (log.trace, log.trace_steps): a per-rank timeline of steps A..B —
// data wait, host→device copy, forward and backward of every layer, the
// loss, the wait for the gradients, the optimizer, evaluation, checkpoint
// snapshot and write, and every collective's own start and end (taken from
// the flight recorder, dist/flight_recorder.h, so each gradient bucket's
// allreduce appears with its true completion time, not when the trainer
// looked) — gathered to rank 0, which writes one Chrome-trace JSON file
// (Perfetto, chrome://tracing): one process per rank, threads "trainer",
// "collectives", "checkpoint writer".
//
// Clocks: every rank takes its time origin right after one barrier at the
// start of training, so ranks line up to within that barrier's exit skew
// (microseconds on one node, a network latency across nodes).
// Off (log.trace empty), every hook is one branch; the layer hook is not
// even installed. Times are host times: on a GPU, kernels run later than
// they are queued (device-side times are not recorded yet).
//
// NVTX (dist/nvtx.h): within A..B the same phases are also NVTX ranges on
// the trainer thread — "step N" holding data wait, host to device, forward,
// loss, backward, gradient wait, optimizer — plus evaluation and checkpoint
// snapshot, so an Nsight Systems capture shows them over the kernels. Layers
// are not ranges (the layer hook reports after the fact). CPU-only builds:
// no-ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/flight_recorder.h"

namespace hpc::train {

class Tracer {
 public:
  // steps: "A:B", 1 ≤ A ≤ B (UserError otherwise). file empty: off. rank: the events' process.
  Tracer(std::string file, const std::string& steps, int rank);

  bool enabled() const { return !file_.empty(); }
  // The step being computed (1-based); recording happens only within A..B.
  // Traced, it also opens the NVTX range "step N" (closing any range a failed step left open).
  void set_step(int64_t step);
  bool on() const { return on_; }
  int64_t last_step() const { return last_; }
  // NVTX, while recording: closes the open phase range and opens `name` inside the step's (nullptr: none).
  void phase(const char* name);
  // Closes the phase and step ranges (the step's end, however it ends).
  void end_step();
  // NVTX, while recording: one range for a scope (evaluation, checkpoint snapshot).
  class Range {
   public:
    Range(const Tracer& t, const char* name);
    ~Range();
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;

   private:
    bool open_;
  };
  // After a barrier on every rank: the time origin.
  void start(double now);
  // One complete event (monotonic seconds). tid: 0 trainer, 1 collectives, 2 checkpoint writer.
  void span(const char* cat, const std::string& name, double t0, double t1, int tid = 0);
  // The same for an event of `step` seen later (a background write, a collective): kept when step is traced.
  void span_of(int64_t step, const char* cat, const std::string& name, double t0, double t1, int tid);
  bool traces(int64_t step) const { return enabled() && !finished_ && step >= first_ && step <= last_; }
  // Adds the collectives that completed since the last call (the flight record), if recording.
  void take_collectives(dist::FlightRecorder& flight);
  // Every rank: gathers the events to rank 0, which writes the file. Once; later calls do nothing.
  // Returns the file's path on rank 0 once written ("" elsewhere or when off).
  std::string finish(dist::Communicator& comm, const std::string& host);

 private:
  std::string file_;
  int rank_ = 0;
  int64_t first_ = 1, last_ = 0, step_ = 0;
  bool on_ = false, finished_ = false;
  int nvtx_depth_ = 0;  // NVTX ranges open on the trainer thread: 1 the step's, 2 a phase's too
  double origin_ = 0;
  uint64_t taken_order_ = 0;  // the flight record's entry number of the last collective taken
  std::string events_;        // this rank's events, JSON objects separated by ",\n"
};

// One Chrome-trace file from every rank's events (`{…},\n{…}` each, as Tracer keeps them).
std::string chrome_trace_json(const std::vector<std::string>& per_rank,
                              const std::vector<std::string>& hosts);

}  // namespace hpc::train
