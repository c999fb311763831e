// The test-only fault hook (src/core/fault.h) and what the code
// at each I/O point does with the failure it injects, without MPI:
// - HPCTRAIN_FAULT parsing: every kind and point, ranks, steps, lists,
//   sleep=MS, and one-line errors for bad values;
// - when a fault fires: rank, step (I/O faults and sleeps stay on, others
//   fire once), signals raised at the point;
// - the checkpoint writer under ENOSPC at each of write, close, fsync and
//   rename: IoError naming the path and "no space left on device", no
//   temporary file left, the file already at that path untouched;
// - MetricsLog under ENOSPC: one warning, whole lines only, a note when
//   writing works again.
// The end-to-end outcomes (exit codes, all ranks, resume) are in
// tests/e2e/fault_*.sh.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/async_writer.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "core/fault.h"
#include "temp_dir.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using namespace hpc;

namespace {

using hpc::test::TempDir;

// Every test leaves the process without a plan, whatever happens in it.
class Faults : public ::testing::Test {
 protected:
  void TearDown() override { clear_faults(); }
  static void install(const char* text, int rank) { install_faults(parse_faults(text), rank); }
};

std::atomic<int> usr1_count{0};
extern "C" void count_usr1(int) { usr1_count.fetch_add(1); }

ckpt::Checkpoint small_checkpoint(int64_t step) {
  ckpt::Checkpoint c;
  c.step = step, c.epoch = 0, c.step_in_epoch = step, c.consumed_samples = step * 8, c.total_steps = 100;
  c.world_size = 1, c.batch_size = 8, c.accum_steps = 1, c.global_batch = 8, c.train_samples = 800;
  c.spec = "flatten linear(3)";
  c.input_shape = Shape{1, 2, 2};
  c.params = Tensor(Shape{15}, DType::F32);
  for (int64_t i = 0; i < 15; ++i) c.params.data<float>()[i] = 0.5f * static_cast<float>(i) + step;
  c.param_entries = {{"1.linear.weight", 0, Shape{3, 4}}, {"1.linear.bias", 12, Shape{3}}};
  c.optimizer = "sgd";
  c.optimizer_steps = step;
  c.seed = 42;
  c.sampler_batch = step, c.dropout_step = step;
  c.log_window = {{0, 0, 0, 0}};
  c.config_ini = "[train]\nsteps = 100\n";
  c.hpctrain_version = "test";
  c.created_unix = 1700000000;
  return c;
}

int count_tmp_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
  return n;
}

}  // namespace

TEST_F(Faults, ParsesKindPointRankStep) {
  std::vector<Fault> f =
      parse_faults("enospc@ckpt_write:0:20,sigusr1@backward:1,eio@data_read,stall@step:*:4");
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].kind, FaultKind::Enospc);
  EXPECT_EQ(f[0].point, FaultPoint::CkptWrite);
  EXPECT_EQ(f[0].rank, 0);
  EXPECT_EQ(f[0].step, 20);
  EXPECT_EQ(f[1].kind, FaultKind::SigUsr1);
  EXPECT_EQ(f[1].point, FaultPoint::Backward);
  EXPECT_EQ(f[1].rank, 1);
  EXPECT_EQ(f[1].step, 0);
  EXPECT_EQ(f[2].rank, -1);
  EXPECT_EQ(f[3].rank, -1);
  EXPECT_EQ(f[3].step, 4);
  EXPECT_EQ(f[0].text, "HPCTRAIN_FAULT=enospc@ckpt_write:0:20");
  EXPECT_TRUE(parse_faults(nullptr).empty());
  EXPECT_TRUE(parse_faults("").empty());
  // Every point has a name that parses back to it, with some kind it takes.
  for (const char* ok : {"sigterm@step", "sigint@allreduce", "enospc@ckpt_close", "enospc@ckpt_fsync",
                         "enospc@ckpt_rename", "enospc@metrics", "exit@step:3:1", "sigint@ckpt_write"})
    EXPECT_EQ(parse_faults(ok).size(), 1u) << ok;
}

// What the former HPCTRAIN_TEST_* hooks were: a stop after a step, a slow
// step, a death half-way through a checkpoint write, a slow ring send.
TEST_F(Faults, SleepStepEndAndTheFormerHooks) {
  std::vector<Fault> f =
      parse_faults("sigusr1@step_end:3:21,sleep=30@step_end,exit@ckpt_write:0:20,sleep=150@ring_send:1");
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].kind, FaultKind::SigUsr1);
  EXPECT_EQ(f[0].point, FaultPoint::StepEnd);
  EXPECT_EQ(f[0].rank, 3);
  EXPECT_EQ(f[0].step, 21);
  EXPECT_EQ(f[1].kind, FaultKind::Sleep);
  EXPECT_EQ(f[1].sleep_ms, 30);
  EXPECT_EQ(f[1].rank, -1);
  EXPECT_EQ(f[1].step, 0);
  EXPECT_EQ(f[2].kind, FaultKind::Exit);
  EXPECT_EQ(f[2].point, FaultPoint::CkptWrite);
  EXPECT_EQ(f[2].step, 20);
  EXPECT_EQ(f[3].point, FaultPoint::RingSend);
  EXPECT_EQ(f[3].sleep_ms, 150);
  EXPECT_EQ(f[3].text, "HPCTRAIN_FAULT=sleep=150@ring_send:1");
  for (const char* ok : {"sleep=1@step", "sleep=5@data_read", "stall@step_end:1:2", "exit@step_end"})
    EXPECT_EQ(parse_faults(ok).size(), 1u) << ok;
}

TEST_F(Faults, SleepsStayOnFromTheirStep) {
  using Clock = std::chrono::steady_clock;
  auto ms_of = [](FaultPoint p) {
    const auto t0 = Clock::now();
    EXPECT_EQ(fault_at(p), 0);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  install("sleep=40@step_end:0:2", 0);
  set_fault_step(1);
  EXPECT_LT(ms_of(FaultPoint::StepEnd), 30);
  EXPECT_LT(ms_of(FaultPoint::Step), 30);  // another point
  set_fault_step(2);
  EXPECT_GE(ms_of(FaultPoint::StepEnd), 40);
  set_fault_step(3);
  EXPECT_GE(ms_of(FaultPoint::StepEnd), 40);  // a slow rank stays slow
  install("sleep=40@step_end:0:2", 1);        // another rank
  set_fault_step(2);
  EXPECT_LT(ms_of(FaultPoint::StepEnd), 30);
}

TEST_F(Faults, MalformedValuesAreOneLineErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"enospc", "expected KIND@POINT"},
      {"full@ckpt_write", "unknown kind 'full'"},
      {"enospc@disk", "unknown point 'disk'"},
      {"eio@ckpt_write", "'eio' cannot happen at 'ckpt_write'"},
      {"enospc@data_read", "'enospc' cannot happen at 'data_read'"},
      {"stall@backward", "'stall' cannot happen at 'backward'"},
      {"sigusr1@metrics", "'sigusr1' cannot happen at 'metrics'"},
      {"abort@ckpt_close", "'abort' cannot happen at 'ckpt_close'"},
      {"sigusr1@step:x", "RANK a rank or *"},
      {"sigusr1@step:1:0", "STEP"},
      {"sigusr1@step:-1:3", "RANK"},
      {"sigusr1@step,", "expected KIND@POINT"},
      {"sleep@step", "sleep=MS"},
      {"sleep=0@step", "sleep=MS"},
      {"sleep=ms@step", "sleep=MS"},
      {"stall=3@step", "takes no '=' argument"},
      {"sleep=5@backward", "'sleep' cannot happen at 'backward'"},
      {"sleep=5@ring_sent", "unknown point 'ring_sent'"},
      {"eio@ring_send", "'eio' cannot happen at 'ring_send'"},
  };
  for (const auto& [text, why] : cases) {
    try {
      parse_faults(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const UserError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("HPCTRAIN_FAULT='") + text + "'"), std::string::npos) << m;
      EXPECT_NE(m.find(why), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST_F(Faults, InertWithoutAPlan) {
  clear_faults();
  set_fault_step(5);
  for (FaultPoint p : {FaultPoint::Step, FaultPoint::CkptWrite, FaultPoint::Metrics, FaultPoint::DataRead})
    EXPECT_EQ(fault_at(p), 0);
}

TEST_F(Faults, IoFaultsStayOnFromTheirStepOnTheirRank) {
  install("enospc@metrics:0:3,eio@data_read", 0);
  set_fault_step(2);
  EXPECT_EQ(fault_at(FaultPoint::Metrics), 0);
  EXPECT_EQ(fault_at(FaultPoint::DataRead), EIO);  // no step: from the start
  set_fault_step(3);
  EXPECT_EQ(fault_at(FaultPoint::Metrics), ENOSPC);
  set_fault_step(7);
  EXPECT_EQ(fault_at(FaultPoint::Metrics), ENOSPC);  // a full disk stays full
  EXPECT_EQ(fault_at(FaultPoint::CkptWrite), 0);     // another point
  install("enospc@metrics:0:3", 1);                  // another rank
  set_fault_step(5);
  EXPECT_EQ(fault_at(FaultPoint::Metrics), 0);
}

TEST_F(Faults, SignalsAreRaisedOnceAtTheirStep) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = count_usr1;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  usr1_count = 0;
  install("sigusr1@backward:2:4", 2);
  set_fault_step(3);
  EXPECT_EQ(fault_at(FaultPoint::Backward), 0);
  EXPECT_EQ(usr1_count.load(), 0);
  set_fault_step(4);
  EXPECT_EQ(fault_at(FaultPoint::Allreduce), 0);
  EXPECT_EQ(usr1_count.load(), 0);
  EXPECT_EQ(fault_at(FaultPoint::Backward), 0);  // raise() delivers before it returns
  EXPECT_EQ(usr1_count.load(), 1);
  fault_at(FaultPoint::Backward);  // once per run, not once per layer
  EXPECT_EQ(usr1_count.load(), 1);
  sigaction(SIGUSR1, &old, nullptr);
}

// A crash at start-up (before training) on the job's Nth start: STEP counts the
// starts of a Slurm job (SLURM_RESTART_COUNT + 1), so a requeued job crashes
// once, at the restart the test names, and starts normally at the next.
TEST_F(Faults, StartupCrashFiresOnTheNamedStartOfTheJob) {
  std::vector<Fault> f = parse_faults("segv@startup:0:2,abort@startup:1,exit@startup");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].kind, FaultKind::Segv);
  EXPECT_EQ(f[0].point, FaultPoint::Startup);
  EXPECT_EQ(f[0].rank, 0);
  EXPECT_EQ(f[0].step, 2);
  for (const char* bad : {"sigusr1@startup", "stall@startup", "sleep=5@startup", "enospc@startup"})
    EXPECT_THROW(parse_faults(bad), UserError) << bad;
  EXPECT_EQ(parse_faults("segv@backward:1:3").size(), 1u);  // segv goes wherever the signals go

  const char* saved = std::getenv("SLURM_RESTART_COUNT");
  const std::string restore = saved ? saved : "";
  unsetenv("SLURM_RESTART_COUNT");
  EXPECT_EQ(job_start_number(), 1);  // outside Slurm: the first start
  setenv("SLURM_RESTART_COUNT", "0", 1);
  EXPECT_EQ(job_start_number(), 1);
  setenv("SLURM_RESTART_COUNT", "3", 1);
  EXPECT_EQ(job_start_number(), 4);
  setenv("SLURM_RESTART_COUNT", "x", 1);
  EXPECT_EQ(job_start_number(), 1);

  // Not on the first start, nor on another rank; on start 2 rank 0 dies of SIGSEGV (the
  // default action, after any handler that returns), having said why.
  setenv("SLURM_RESTART_COUNT", "0", 1);
  install("segv@startup:0:2", 0);
  EXPECT_EQ(fault_at(FaultPoint::Startup), 0);
  setenv("SLURM_RESTART_COUNT", "1", 1);
  install("segv@startup:0:2", 1);
  EXPECT_EQ(fault_at(FaultPoint::Startup), 0);
  install("segv@startup:0:2", 0);
  EXPECT_EQ(fault_at(FaultPoint::Step), 0);  // another point
  EXPECT_EXIT(
      {
        struct sigaction sa {};
        sa.sa_handler = [](int) {};  // returns, as a handler written for a real fault does
        sigaction(SIGSEGV, &sa, nullptr);
        fault_at(FaultPoint::Startup);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "rank 0: HPCTRAIN_FAULT=segv@startup:0:2: crashing \\(SIGSEGV\\) at start-up \\(start 2 of the job\\)");
  setenv("SLURM_RESTART_COUNT", "2", 1);
  EXPECT_EQ(fault_at(FaultPoint::Startup), 0);  // the next restart starts normally
  if (saved)
    setenv("SLURM_RESTART_COUNT", restore.c_str(), 1);
  else
    unsetenv("SLURM_RESTART_COUNT");
}

// ENOSPC at each point of the write: IoError naming the path, no temporary
// file, and the complete checkpoint already under that name still reads.
TEST_F(Faults, CheckpointWriteDiskFullKeepsThePreviousFile) {
  for (const char* point : {"ckpt_write", "ckpt_close", "ckpt_fsync", "ckpt_rename"}) {
    SCOPED_TRACE(point);
    TempDir dir;
    const std::string path = dir.file("ckpt-00000010.h5");
    clear_faults();
    ckpt::write_checkpoint(path, small_checkpoint(10));
    install((std::string("enospc@") + point + ":0:20").c_str(), 0);
    set_fault_step(20);
    try {
      ckpt::write_checkpoint(path, small_checkpoint(20));  // over the good file: the worst case
      ADD_FAILURE() << "no error";
    } catch (const IoError& e) {
      EXPECT_EQ(e.exit_code(), EXIT_IO);
      EXPECT_EQ(std::string(e.what()),
                "cannot write checkpoint " + path + ": no space left on device (ENOSPC)");
    }
    EXPECT_EQ(count_tmp_files(dir.path()), 0);
    clear_faults();
    const ckpt::Checkpoint back = ckpt::read_checkpoint(path);
    EXPECT_EQ(back.step, 10);
    EXPECT_EQ(back.params.data<float>()[1], 10.5f);
  }
}

TEST_F(Faults, MetricsOnAFullDiskWarnOnceAndKeepWholeLines) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  install("enospc@metrics:0:3", 0);
  testing::internal::CaptureStderr();
  {
    train::MetricsLog log(path);
    for (int64_t step = 1; step <= 6; ++step) {
      set_fault_step(step);
      if (step == 5) clear_faults();  // space freed
      log.write(train::Record().add_int("step", step).add("loss", 0.5));
    }
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      err.find("hpctrain: warning: cannot write " + path + " (No space left on device): training continues"),
      std::string::npos)
      << err;
  EXPECT_EQ(err.find("warning", err.find("warning") + 1), std::string::npos)
      << "warned more than once: " << err;
  EXPECT_NE(err.find("can be written again; 2 record(s) before this one were lost"), std::string::npos)
      << err;
  std::ifstream in(path);
  std::string line, steps;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
    steps += line.substr(line.find(':') + 2, 1);
  }
  EXPECT_EQ(steps, "1256");
}

// The background writer (ckpt.async): the same file as a synchronous write,
// its faults fire at the step it saves (FaultStepScope) while the trainer's
// step has moved on, and a full disk comes back as a result, not a throw.
namespace {
ckpt::WriteJob write_job(const TempDir& dir, int64_t step) {
  ckpt::WriteJob job;
  job.path = dir.file("ckpt-000000" + std::to_string(step) + ".h5");
  job.dir = dir.path();
  job.why = "every 10 steps";
  job.step = step;
  job.keep = 2;
  job.checkpoint = small_checkpoint(step);
  return job;
}
}  // namespace

TEST_F(Faults, AsyncWriterWritesTheSameFileAndReportsAFullDisk) {
  TempDir dir;
  ckpt::AsyncWriter writer;
  EXPECT_FALSE(writer.poll().has_value());
  EXPECT_FALSE(writer.wait().has_value());
  writer.start(write_job(dir, 10));
  EXPECT_TRUE(writer.in_flight());
  EXPECT_EQ(writer.in_flight_step(), 10);
  std::optional<ckpt::WriteResult> r = writer.wait();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->ok) << r->error;
  EXPECT_EQ(r->step, 10);
  EXPECT_GT(r->bytes, 0);
  EXPECT_FALSE(writer.in_flight());
  EXPECT_EQ(ckpt::read_checkpoint(dir.file("ckpt-00000010.h5")).params.data<float>()[1], 10.5f);

  // One-shot and persistent faults match the saved step (20), not the trainer's (23).
  install("enospc@ckpt_rename:0:20,exit@ckpt_write:0:23", 0);
  set_fault_step(23);
  writer.start(write_job(dir, 20));
  for (int i = 0; i < 1000 && !(r = writer.poll()); ++i) usleep(2000);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ok);
  EXPECT_TRUE(r->disk_full);
  EXPECT_EQ(r->error,
            "cannot write checkpoint " + dir.file("ckpt-00000020.h5") + ": no space left on device (ENOSPC)");
  EXPECT_EQ(count_tmp_files(dir.path()), 0);
  EXPECT_FALSE(fs::exists(dir.file("ckpt-00000020.h5")));
  {
    FaultStepScope at(20);
    EXPECT_EQ(fault_at(FaultPoint::CkptRename), ENOSPC);
  }
  set_fault_step(19);
  EXPECT_EQ(fault_at(FaultPoint::CkptRename), 0);  // the scope is gone: the trainer's step again
}
