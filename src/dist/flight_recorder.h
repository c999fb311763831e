// FlightRecorder: this rank's last 256 collectives, for the post-mortem of a
// hang (what PyTorch's NCCL flight recorder keeps).
//
// Each entry: the collective's number (the Heartbeat's: equal numbers in one
// group are the same collective on every member), its group ("world",
// "tp[0-1]": dist/group.h), op, element count, dtype, communicator, the
// peer of a point-to-point message (numbered per peer and direction), the
// step, enqueue/start/end times (this process's monotonic clock, plus
// the wall clock of the dump to relate ranks) and state (started, completed).
// The communicators record (MpiComm, NcclComm); the file is written by dump() to
// RUN_DIR/flight-RANK.json (set_path, by the trainer) when the watchdog
// explains a timeout (exit 3), when a peer's watchdog asks this rank where
// it is (so a stalled rank whose main thread cannot move still writes its
// file), on SIGUSR2 (Watchdog polls the flag), and on a fatal signal
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: dump_in_signal, from the
// handler, then the action installed before it: the default one, so the exit status stays the
// signal's, or Open MPI's / a sanitizer's report). `hpctrain doctor --flight
// RUN_DIR` reads the files (doctor/flight.h).
//
// A mutex guards the ring: a few collectives per step and bucket, so the
// lock costs nothing measurable; dump() copies under it and writes outside.
// The file is written to a temporary name and renamed: never half a file.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/group.h"

namespace hpc::dist {

enum class CollOp : int32_t;

class FlightRecorder {
 public:
  static constexpr size_t CAPACITY = 256;

  enum class State : int32_t { Started = 1, Completed = 2 };
  struct Entry {
    uint64_t seq = 0;
    int32_t op = 0;  // CollOp
    State state = State::Started;
    int64_t count = 0;
    DType dtype = DType::F32;
    const char* comm = "";  // a string literal: "mpi", "nccl"
    int64_t step = 0;
    double enqueue_s = 0, start_s = 0, end_s = 0;
    GroupKind group = GroupKind::World;
    int32_t peer = -1;   // send / recv: the other rank (world rank)
    uint64_t order = 0;  // 1 for the first entry ever recorded, 2 for the next, …
  };

  void started(uint64_t seq, CollOp op, int64_t count, DType dtype, const char* comm, int64_t step,
               GroupKind group = GroupKind::World, int peer = -1);
  // Collective #seq of `group` completed; a message: send / recv #seq to / from `peer`.
  void completed(uint64_t seq, GroupKind group = GroupKind::World, CollOp p2p = CollOp{}, int peer = -1);

  // The completed entries recorded after entry number `order`, oldest first (timelines: train/trace.h).
  std::vector<Entry> completed_after(uint64_t order);

  // How the files name this rank's group of `kind` ("tp[0-1]"); "world" until set (dist::Grid sets them).
  void set_group_name(GroupKind kind, const std::string& name);
  std::string group_name(GroupKind kind) const;

  // Where dump() writes (empty: nowhere), and what the file says about this rank.
  void set_path(const std::string& path, int rank, const std::string& host);
  const std::string& path() const { return path_; }
  // Writes the file; returns false (quietly) when no path is set or the write fails.
  bool dump(const std::string& reason);
  // The JSON text dump() writes.
  std::string to_json(const std::string& reason);
  // dump() for a signal handler: the same file, formatted into buffers set_path allocated and written
  // with open/write/rename, taking no lock (the crashing thread may hold one: an entry being written
  // may come out torn) and allocating nothing. False when no path is set or the write fails.
  bool dump_in_signal(const char* reason) noexcept;

 private:
  static constexpr size_t GROUP_NAME_BYTES = 96;
  // Fixed buffers, so that dump_in_signal reads them without a lock or an allocation.
  std::array<std::array<char, GROUP_NAME_BYTES>, GROUP_KINDS> group_names_{};
  mutable std::mutex mu_;
  std::array<Entry, CAPACITY> ring_{};
  uint64_t recorded_ = 0;  // entries ever recorded; the newest is at (recorded_ - 1) % CAPACITY
  std::string path_, host_;
  int rank_ = 0;
  std::mutex dump_mu_;  // one dump at a time (main thread and watchdog may both dump)
  // dump_in_signal's: the paths and the escaped host as C strings, and room for the whole file.
  std::vector<char> sig_path_, sig_tmp_, sig_host_, sig_text_;
};

// SIGUSR2 asks every rank that gets it for its flight record (kill -USR2, scancel --signal=USR2).
void install_flight_signal();
// True once after each SIGUSR2 (the watchdog thread polls it).
bool flight_signal_pending();
// SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT write `recorder`'s file (reason "signal SIGSEGV"…), then
// the action that was installed before takes over (by default the process dies of the signal). Once per
// process; the handler runs on an alternate stack on the calling thread (a stack overflow still gets its file
// there).
void install_fatal_signal_dump(FlightRecorder& recorder);

}  // namespace hpc::dist
