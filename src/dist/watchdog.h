// Watchdog: finds out, when a collective times out, which rank is behind.
//
// The problem: the rank that is behind is exactly the one whose main thread
// cannot answer (it is stuck in a computation, sleeping, deadlocked, or
// dead). So every rank runs a small watchdog thread, and MPI is started with
// MPI_THREAD_MULTIPLE so that this thread may use MPI on its own duplicate of
// MPI_COMM_WORLD, out of band of the training collectives:
//
//   * the thread keeps a receive posted for "where are you?" queries and
//     answers each with the rank's Heartbeat (step, collectives started, the
//     collective it is blocked in and for how long). It wakes every 20 ms:
//     cheap, and it never touches the main thread's buffers or requests.
//   * a rank whose collective passes dist.timeout (MpiComm's polling
//     deadline) calls explain(): it queries every other rank, waits up to 2 s
//     for the answers, asks the OS about silent ranks on its own host (gone,
//     stopped, running), and builds the report (hang_report.h). The lowest
//     rank waiting in the newest collective is the reporter: its PeerError
//     is printed and aborts the job (exit 3). The other waiting ranks pause
//     a few seconds first so that one report, not N, reaches the log; if the
//     reporter died meanwhile they print their own copy and abort. (A rank
//     that gave up keeps its Heartbeat in the collective until it exits:
//     see MpiComm::fail.)
//   * a backstop: if the main thread has been blocked in one collective for
//     dist.timeout + 10 s without its own deadline firing (a wait that does
//     not poll), the thread reports and calls MPI_Abort itself.
//
// A dead rank is detected the same way: it does not answer. Without
// MPI_THREAD_MULTIPLE there is no thread; timeouts still end the job, the
// report just cannot name the culprit.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dist/hang_report.h"
#include "dist/heartbeat.h"

namespace hpc::dist {

class Watchdog final : public HangHandler {
 public:
  // Collective over `world` (duplicates it). with_thread = MPI_THREAD_MULTIPLE was provided.
  Watchdog(MPI_Comm world, std::vector<PeerInfo> peers, Heartbeat& hb, double timeout_s, bool with_thread);
  ~Watchdog() override;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void set_timeout(double seconds) { timeout_s_.store(seconds); }
  // The grid (dist/grid.h), so that a report names the groups other ranks wait in. Set once, during set-up.
  void set_shape(const GridShape& shape);
  // Queries the other ranks and returns the report text; non-reporters pause first (see above).
  using HangHandler::explain;
  std::string explain(const GroupTag& group, const WaitPoint& at, const std::string& reason) override;

 private:
  struct StateMsg;
  void serve();
  void backstop();
  std::vector<PeerState> ask_everyone();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<PeerInfo> peers_;
  Heartbeat& hb_;
  std::mutex shape_mu_;
  GridShape shape_;
  std::atomic<double> timeout_s_;
  bool with_thread_;

  int query_out_ = 0;      // the query's payload: must outlive sends to silent ranks
  std::mutex explain_mu_;  // one explanation per process, shared by main and watchdog
  std::optional<std::string> explained_;
  std::atomic<bool> explaining_{false};

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hpc::dist
