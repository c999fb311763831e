// The parts of src/dist/ that need no MPI: bucket plans and the reducer's
// schedule (against the fake communicator), hang reports, process
// probing, backend and GPU choice, the launch check (fault injection:
// test_faults.cpp).
// The collectives themselves run on real ranks in tests/mpi/.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "core/error.h"
#include "dist/context.h"
#include "dist/devices.h"
#include "dist/grad_reducer.h"
#include "dist/hang_report.h"
#include "dist/heartbeat.h"
#include "fake_comm.h"

using namespace hpc;
using namespace hpc::dist;

namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// The reducer's communicator: a FakeComm whose ranges are offsets into the gradients;
// every call it gets must be an asynchronous average.
struct ReducerComm : test::FakeComm {
  explicit ReducerComm(const Tensor& grads) {
    set_base(grads);
    on_start = [](const Call& c) {
      EXPECT_EQ(c.kind, "async");
      EXPECT_EQ(c.op, ReduceOp::Avg);
    };
  }
};

std::vector<PeerInfo> peers(int n) {
  std::vector<PeerInfo> p;
  p.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) p.push_back({r < 2 ? "n01" : "n02", 1000 + r});
  return p;
}

PeerState waiting(uint64_t seq, int64_t step = 12) {
  PeerState s;
  s.answered = true;
  s.step = step;
  s.started[0] = seq;
  s.waiting_on = seq;
  s.waiting_op = CollOp::Allreduce;
  s.state_s = 30.2;
  return s;
}

PeerState computing(uint64_t last, int64_t step = 12) {
  PeerState s;
  s.answered = true;
  s.step = step;
  s.started[0] = last;
  s.state_s = 31.5;
  return s;
}

PeerState silent(ProcState p) {
  PeerState s;
  s.proc = p;
  return s;
}

const std::string TIMEOUT = "did not complete within 30 s (dist.timeout)";

}  // namespace

TEST(BucketPlan, CutsAtBoundariesOnceABucketIsFull) {
  // Tensors [0,10) [10,30) [30,100) [100,103): from the end, a bucket closes at the first cut where it holds
  // ≥ size.
  const std::vector<int64_t> cuts = {0, 10, 30, 100};
  EXPECT_EQ(GradReducer::plan(103, 1, cuts),
            (Ranges{{100, 103}, {30, 100}, {10, 30}, {0, 10}}));      // one per tensor
  EXPECT_EQ(GradReducer::plan(103, 1000, cuts), (Ranges{{0, 103}}));  // one for all
  EXPECT_EQ(GradReducer::plan(103, 50, cuts), (Ranges{{30, 103}, {0, 30}}));
  EXPECT_EQ(GradReducer::plan(103, 73, cuts), (Ranges{{30, 103}, {0, 30}}));
  EXPECT_EQ(GradReducer::plan(103, 74, cuts), (Ranges{{10, 103}, {0, 10}}));
  // Cut points outside (0, n), repeated or unsorted are harmless.
  EXPECT_EQ(GradReducer::plan(103, 1, {100, -5, 10, 10, 500, 30, 0}), GradReducer::plan(103, 1, cuts));
}

TEST(BucketPlan, WithoutCutPointsBucketsHaveExactlyTheSize) {
  EXPECT_EQ(GradReducer::plan(10, 4, {}), (Ranges{{6, 10}, {2, 6}, {0, 2}}));
  EXPECT_EQ(GradReducer::plan(8, 4, {}), (Ranges{{4, 8}, {0, 4}}));
  EXPECT_EQ(GradReducer::plan(0, 4, {}), Ranges{});
}

TEST(BucketPlan, TheFirstBucketIsSmallSoThatCommunicationStartsEarly) {
  EXPECT_EQ(GradReducer::plan(103, 1000, {0, 10, 30, 100}, 3), (Ranges{{100, 103}, {0, 100}}));
  EXPECT_EQ(GradReducer::plan(103, 1000, {0, 10, 30, 100}, 4), (Ranges{{30, 103}, {0, 30}}));
  EXPECT_EQ(GradReducer::plan(10, 4, {}, 1), (Ranges{{9, 10}, {5, 9}, {1, 5}, {0, 1}}));
  // In the reducer: 1 MiB, or bucket_mb when that is smaller.
  Tensor grads(Shape{1 << 20}, DType::F32);  // 4 MiB, one tensor per 256 Ki elements
  ReducerComm comm(grads);
  GradReducer red(comm, grads, 25.0 * 1048576, {0, 1 << 18, 2 << 18, 3 << 18});
  EXPECT_EQ(red.bucket_ranges(), (Ranges{{3 << 18, 1 << 20}, {0, 3 << 18}}));
  GradReducer small(comm, grads, 4.0, {0, 1 << 18, 2 << 18, 3 << 18});
  EXPECT_EQ(small.num_buckets(), 4);
}

TEST(GradReducer, StartsEachBucketWhenBackwardHasPassedIt) {
  Tensor grads(Shape{103}, DType::F32);
  ReducerComm comm(grads);
  GradReducer red(comm, grads, 4.0 /* bytes: one element, so one bucket per tensor */, {0, 10, 30, 100});
  ASSERT_EQ(red.num_buckets(), 4);
  red.begin();
  red.on_ready(103);  // nothing final yet
  EXPECT_TRUE(comm.calls.empty());
  red.on_ready(100);  // the last tensor is done
  ASSERT_EQ(comm.calls.size(), 1u);
  EXPECT_EQ(comm.calls[0].ranges, (Ranges{{100, 103}}));
  red.on_ready(10);  // two tensors at once (a layer with weight and bias): one group
  ASSERT_EQ(comm.calls.size(), 2u);
  EXPECT_EQ(comm.calls[1].ranges, (Ranges{{30, 100}, {10, 30}}));
  EXPECT_GT(comm.tests, 0) << "buckets in flight are advanced during backward";
  red.finish();  // the first tensor's bucket starts here; all are waited for
  ASSERT_EQ(comm.calls.size(), 3u);
  EXPECT_EQ(comm.calls[2].ranges, (Ranges{{0, 10}}));
  EXPECT_EQ(comm.waits, 4);
}

TEST(GradReducer, WithoutOverlapEverythingStartsAfterBackward) {
  Tensor grads(Shape{103}, DType::F32);
  ReducerComm comm(grads);
  GradReducer red(comm, grads, 4.0, {0, 10, 30, 100}, /*overlap=*/false);
  red.begin();
  for (int64_t f : {100, 30, 10, 0}) red.on_ready(f);
  EXPECT_TRUE(comm.calls.empty());
  red.finish();
  ASSERT_EQ(comm.calls.size(), 1u);
  EXPECT_EQ(comm.calls[0].ranges.size(), 4u);
  EXPECT_EQ(comm.waits, 4);
}

TEST(GradReducer, EveryRoundStartsAfresh) {
  Tensor grads(Shape{40}, DType::F32);
  ReducerComm comm(grads);
  GradReducer red(comm, grads, 1e9, {0, 20});
  for (int round = 0; round < 3; ++round) {
    red.begin();
    red.on_ready(20);
    red.on_ready(0);
    red.finish();
  }
  ASSERT_EQ(comm.calls.size(), 3u);
  for (const auto& c : comm.calls) EXPECT_EQ(c.ranges, (Ranges{{0, 40}}));
}

TEST(HangReport, NamesTheStuckRankAndWhereTheOthersWait) {
  std::vector<PeerState> s = {waiting(41), computing(40), waiting(41), waiting(41)};
  HangReport r = describe_hang(2, 41, CollOp::Allreduce, 12, TIMEOUT, peers(4), s, true);
  EXPECT_EQ(r.reporter, 0);
  EXPECT_EQ(
      r.text,
      "collective #41 (allreduce at step 12) did not complete within 30 s (dist.timeout): rank 1 (host n01, "
      "pid 1001) is stuck at step 12: no collective for 31.5 s, the last was #40; ranks 0,2,3 wait in #41");
}

TEST(HangReport, ASilentRankIsNamedWithWhatTheOsSays) {
  std::vector<PeerState> s = {silent(ProcState::Gone), waiting(41), waiting(41)};
  HangReport r = describe_hang(1, 41, CollOp::Allreduce, 12, TIMEOUT, peers(3), s, true);
  EXPECT_EQ(r.reporter, 1) << "rank 0 is the culprit: the lowest waiting rank reports";
  EXPECT_NE(
      r.text.find("rank 0 (host n01, pid 1000) does not answer: its process is gone (killed or crashed)"),
      std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("; ranks 1,2 wait in #41"), std::string::npos) << r.text;
  s[0] = silent(ProcState::Stopped);
  EXPECT_NE(describe_hang(1, 41, CollOp::Allreduce, 12, TIMEOUT, peers(3), s, true).text.find("stopped"),
            std::string::npos);
  s[0] = silent(ProcState::Unknown);
  EXPECT_NE(describe_hang(1, 41, CollOp::Allreduce, 12, TIMEOUT, peers(3), s, true).text.find("unreachable"),
            std::string::npos);
}

TEST(HangReport, RanksInTheSameSituationAreNamedTogether) {
  std::vector<PeerState> s(8, waiting(41));
  for (int r : {4, 5, 6}) s[static_cast<size_t>(r)] = silent(ProcState::Unknown);
  HangReport r = describe_hang(0, 41, CollOp::Allreduce, 12, TIMEOUT, peers(8), s, true);
  EXPECT_NE(r.text.find("ranks 4-6 (on n02) do not answer"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("ranks 0-3,7 wait in #41"), std::string::npos) << r.text;
}

TEST(HangReport, ARankBlockedInAnEarlierCollectiveIsBehind) {
  std::vector<PeerState> s = {waiting(41), waiting(40), waiting(41)};
  HangReport r = describe_hang(0, 41, CollOp::Allreduce, 12, TIMEOUT, peers(3), s, true);
  EXPECT_NE(r.text.find("rank 1 (host n01, pid 1001) waits in #40 (allreduce at step 12) for 30.2 s"),
            std::string::npos)
      << r.text;
}

TEST(HangReport, EveryoneInTheSameCollectiveMeansTheDataIsNotArriving) {
  std::vector<PeerState> s(3, waiting(41));
  HangReport r = describe_hang(2, 41, CollOp::Allreduce, 12, TIMEOUT, peers(3), s, true);
  EXPECT_NE(r.text.find("all 3 ranks wait in #41: its data is not arriving"), std::string::npos) << r.text;
  s[1].waiting_op = CollOp::Broadcast;
  r = describe_hang(2, 41, CollOp::Allreduce, 12, TIMEOUT, peers(3), s, true);
  EXPECT_NE(r.text.find("disagree about what collective #41 is (ranks 0,2 allreduce, rank 1 broadcast)"),
            std::string::npos)
      << r.text;
}

TEST(HangReport, SetUpAndNoWatchdog) {
  std::vector<PeerState> s = {waiting(2, 0), computing(1, 0)};
  EXPECT_NE(
      describe_hang(0, 2, CollOp::Broadcast, 0, TIMEOUT, peers(2), s, true).text.find("stuck during set-up"),
      std::string::npos);
  HangReport r = describe_hang(0, 2, CollOp::Broadcast, 0, TIMEOUT, peers(2), {}, false);
  EXPECT_EQ(r.reporter, 0);
  EXPECT_NE(r.text.find("MPI_THREAD_MULTIPLE"), std::string::npos);
}

TEST(HangReport, RankLists) {
  EXPECT_EQ(rank_list({0}), "0");
  EXPECT_EQ(rank_list({0, 1}), "0,1");
  EXPECT_EQ(rank_list({0, 1, 2, 5, 7, 8, 9, 10}), "0-2,5,7-10");
}

TEST(ProbeProcess, RunningStoppedGone) {
  EXPECT_EQ(probe_process(getpid()), ProcState::Running);
  pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  ASSERT_GT(child, 0);
  kill(child, SIGSTOP);
  int status = 0;
  waitpid(child, &status, WUNTRACED);
  EXPECT_EQ(probe_process(child), ProcState::Stopped);
  kill(child, SIGKILL);
  // The kernel reaps it asynchronously: under load (or a sanitizer) 20 ms was not always enough.
  for (int i = 0; i < 200 && probe_process(child) != ProcState::Gone; ++i) usleep(10000);
  EXPECT_EQ(probe_process(child), ProcState::Gone) << "a zombie counts as gone";
  waitpid(child, &status, 0);
  EXPECT_EQ(probe_process(child), ProcState::Gone);
}

TEST(Heartbeat, NumbersCollectivesAndTracksTheWait) {
  Heartbeat hb;
  EXPECT_EQ(hb.start(), 1u);
  EXPECT_EQ(hb.start(), 2u);
  hb.set_step(7);
  hb.wait_begin(2, CollOp::Barrier);
  EXPECT_EQ(hb.waiting_on(), 2u);
  EXPECT_EQ(hb.waiting_op(), CollOp::Barrier);
  hb.wait_end();
  EXPECT_EQ(hb.waiting_on(), 0u);
  EXPECT_EQ(hb.started(), 2u);
  EXPECT_EQ(hb.step(), 7);
  EXPECT_LT(hb.state_seconds(), 1.0);
}

TEST(Backend, ChoiceAndItsErrors) {
  EXPECT_EQ(resolve_backend(CommBackend::Auto, Device::CPU, true, 4), CommBackend::Mpi);
  EXPECT_EQ(resolve_backend(CommBackend::Auto, Device::CUDA, true, 4), CommBackend::Nccl);
  EXPECT_EQ(resolve_backend(CommBackend::Mpi, Device::CPU, false, 0), CommBackend::Mpi);
  EXPECT_EQ(resolve_backend(CommBackend::Nccl, Device::CUDA, true, 1), CommBackend::Nccl);
  auto message = [](CommBackend b, Device d, bool built, int gpus) {
    try {
      resolve_backend(b, d, built, gpus);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(CommBackend::Nccl, Device::CPU, false, 0).find("built without CUDA"), std::string::npos);
  EXPECT_NE(message(CommBackend::Nccl, Device::CPU, true, 0).find("no CUDA device is visible"),
            std::string::npos);
  EXPECT_NE(message(CommBackend::Nccl, Device::CPU, true, 2).find("trains on the CPU"), std::string::npos);
  EXPECT_NE(message(CommBackend::Mpi, Device::CUDA, true, 2).find("--dist.backend nccl"), std::string::npos);
}

TEST(Backend, GpuPerRank) {
  EXPECT_EQ(pick_device(0, 4), 0);
  EXPECT_EQ(pick_device(3, 4), 3);
  EXPECT_EQ(pick_device(3, 1), 0) << "srun --gpus-per-task=1: every rank sees its own GPU as device 0";
  EXPECT_THROW(pick_device(0, 0), UserError);
  EXPECT_EQ(check_gpu_sharing({"0000:01:00.0", "0000:41:00.0"}, "n01"), "");
  EXPECT_EQ(
      check_gpu_sharing({"0000:01:00.0", "0000:01:00.0"}, "n01").rfind("2 ranks on n01 but only 1 GPU(s)", 0),
      0u);
}

TEST(Launch, PmiMismatchIsDiagnosed) {
  unsetenv("SLURM_STEP_NUM_TASKS");
  EXPECT_EQ(check_launch(1), "");
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  EXPECT_NE(check_launch(1).find("PMI mismatch"), std::string::npos);
  EXPECT_EQ(check_launch(4), "");
  unsetenv("SLURM_STEP_NUM_TASKS");
}

TEST(SelfComm, CollectivesAreTheIdentity) {
  SelfComm c;
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  c.allreduce(Tensor::borrow(x, Shape{3}, DType::F32), ReduceOp::Avg);
  EXPECT_EQ(x[2], 3);
  EXPECT_TRUE(c.allreduce_async(Tensor::borrow(x, Shape{3}, DType::F32), ReduceOp::Sum)->test());
  c.allgather(Tensor::borrow(x, Shape{3}, DType::F32), Tensor::borrow(y, Shape{3}, DType::F32));
  EXPECT_EQ(y[1], 2);
}
