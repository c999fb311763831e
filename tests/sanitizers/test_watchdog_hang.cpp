// The hang-diagnosis path on real ranks, for the sanitizer suites (make tsan-test,
// make asan-test; 2 ranks): rank 1's main thread sleeps past dist.timeout while
// rank 0 waits in an allreduce. Rank 0's deadline fires, its main thread asks
// every rank "where are you?", and rank 1's watchdog thread answers from the
// Heartbeat while rank 1's main thread is busy: the threads the sanitizers
// must see working side by side (the watchdog's query loop, the heartbeat's
// atomics, MpiComm's progress thread). tests/mpi/ covers the happy paths; the
// full report under a stalled hpctrain is tests/e2e/dist_failure.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/mpi_comm.h"
#include "tests/mpi/harness.h"

namespace {

constexpr double TIMEOUT_S = 1.0;  // dist.timeout of this program (see main)

TEST(Watchdog, ATimedOutRankNamesThePeerThatIsBehind) {
  hpc::dist::Communicator& comm = mpitest::ctx().host_comm();
  ASSERT_EQ(comm.size(), 2) << "run on 2 ranks";
  const int rank = comm.rank();
  // Rank 1 stays out of the collective for 3 timeouts: busy, not dead, so its watchdog answers.
  if (rank == 1) std::this_thread::sleep_for(std::chrono::duration<double>(3 * TIMEOUT_S));
  float x = 1;
  std::string what;
  try {
    comm.allreduce(hpc::Tensor::borrow(&x, hpc::Shape{1}, hpc::DType::F32), hpc::dist::ReduceOp::Sum);
  } catch (const hpc::PeerError& e) {
    what = e.what();
  }
  if (rank == 0) {
    // Rank 0 gave up; rank 1, arriving late, may or may not find rank 0's contribution.
    EXPECT_NE(what.find("dist.timeout"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("stuck"), std::string::npos) << what;
    // The rank that gave up still shows itself in the collective, so that a peer timing out later
    // finds it at the front and leaves the report to it (one report, not two).
    EXPECT_NE(mpitest::ctx().heartbeat().waiting_on(), 0u);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, TIMEOUT_S); }
