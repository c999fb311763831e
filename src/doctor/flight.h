// `hpctrain doctor --flight RUN_DIR`: the post-mortem of a hang from the
// ranks' collective flight records (RUN_DIR/flight-RANK.json, written by
// dist::FlightRecorder when a collective timed out, on SIGUSR2 or on a crash).
//
// Collective numbers are the same on every member of a group for the same
// collective (each group of the parallel grid numbers its own: "world",
// "tp[0-1]", dist/group.h), so the record answers, group by group: which
// collective is the first one not completed by every member (the diverging
// one), which members never started it (behind: stuck in computation, in
// another group's collective, or dead), which wait in it, and the last
// collective each rank completed. A rank that is behind and waits in
// nothing is the culprit. Messages (send / recv, numbered per peer and
// direction) are matched end to end: a receive that waits for a send its
// peer never started names the peer. No MPI: it runs on a login node after
// the job ended.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc::doctor {

struct FlightOp {
  uint64_t seq = 0;
  std::string group = "world";  // files from before the grid have no group: the world's
  std::string op, dtype, state;
  int64_t count = 0, step = 0;
  int peer = -1;  // send / recv: the other end (a world rank)
};

struct FlightFile {
  int rank = -1;
  std::string host, reason, path;
  std::vector<FlightOp> ops;  // oldest first
};

// Parses one file as FlightRecorder writes it. Throws UserError naming the file on anything else.
FlightFile parse_flight(const std::string& text, const std::string& path);

struct FlightVerdict {
  bool diverged = false;
  // The first diverging group's (the world's when it diverged, else the first by name):
  std::string group;               // "world", "tp[0-1]"
  uint64_t seq = 0;                // the diverging collective
  std::string what;                // "allreduce of 1024 float32 at step 4"
  std::vector<int> behind;         // never started it
  std::vector<int> waiting;        // started, not completed
  std::vector<int> culprits;       // behind somewhere and waiting in nothing: stuck, or dead
  std::vector<int> missing;        // ranks without a file (0 .. world-1, world from the highest rank seen)
  std::vector<std::string> lines;  // the report
};

// The analysis, a pure function of the files (unit-tested).
FlightVerdict analyse_flight(const std::vector<FlightFile>& files, int world);

// Reads RUN_DIR/flight-*.json, prints the report; exit 0 (no divergence), 1 (a
// divergence: needs fixing), 2 (no readable records).
int run_flight(const std::string& run_dir);

}  // namespace hpc::doctor
