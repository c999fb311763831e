// The flight record written from a fatal-signal handler (dist/flight_signal.cpp):
// its hand-made JSON (no snprintf, no allocation) says what to_json says, it
// writes nothing without a path, and a real SIGSEGV leaves the file and still
// kills the process with SIGSEGV.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "dist/flight_recorder.h"
#include "dist/heartbeat.h"

using namespace hpc;
using namespace hpc::dist;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text with every decimal number replaced by "F", and the numbers.
std::string split_numbers(const std::string& text, std::vector<double>& numbers) {
  static const std::regex decimal("-?[0-9]+\\.[0-9]+");
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), decimal), end; it != end; ++it) {
    out.append(last, (*it)[0].first);
    out += "F";
    numbers.push_back(std::stod(it->str()));
    last = (*it)[0].second;
  }
  out.append(last, text.cend());
  return out;
}

void record(FlightRecorder& f, int n) {
  for (int i = 1; i <= n; ++i) {
    f.started(static_cast<uint64_t>(i), i % 2 ? CollOp::Allreduce : CollOp::Broadcast, 1000 + i,
              i % 3 ? DType::F32 : DType::F64, "mpi", i / 3);
    if (i < n) f.completed(static_cast<uint64_t>(i));  // the newest stays started
  }
}

std::string scratch_dir() {
  std::string dir = std::filesystem::temp_directory_path() / ("flight-signal-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST(FlightSignal, WritesWhatToJsonSays) {
  const std::string dir = scratch_dir();
  for (int n : {0, 5, 300}) {  // none, a few, more than the ring holds
    FlightRecorder f;
    record(f, n);
    const std::string path = dir + "/flight-3.json";
    f.set_path(path, 3, "node\"7\\x");
    ASSERT_TRUE(f.dump_in_signal("signal SIGSEGV")) << n;
    std::vector<double> got, want;
    const std::string got_text = split_numbers(read_file(path), got);
    const std::string want_text = split_numbers(f.to_json("signal SIGSEGV"), want);
    EXPECT_EQ(got_text, want_text) << n;
    ASSERT_EQ(got.size(), want.size()) << n;
    ASSERT_GE(got.size(), 2u);
    // The first two are the dump's own clocks (read apart); the entries' times must agree to %.6f.
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], i < 2 ? 5.0 : 1.5e-6) << n << " #" << i;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  std::filesystem::remove_all(dir);
}

TEST(FlightSignal, NoPathNoFile) {
  FlightRecorder f;
  record(f, 3);
  EXPECT_FALSE(f.dump_in_signal("signal SIGABRT"));
}

TEST(FlightSignalDeathTest, SegvWritesTheFileAndDiesOfIt) {
#if defined(__SANITIZE_ADDRESS__)
  // The handler hands the signal on to the action installed before it: here AddressSanitizer's report,
  // which exits 1 instead of dying of SIGSEGV.
  GTEST_SKIP() << "under AddressSanitizer its own SEGV report follows the dump";
#endif
  const std::string dir = scratch_dir();
  const std::string path = dir + "/flight-0.json";
  EXPECT_EXIT(
      {
        static FlightRecorder f;
        record(f, 4);
        f.set_path(path, 0, "host");
        install_fatal_signal_dump(f);
        const rlimit no_core{};  // zero: a crash on purpose, no core file
        setrlimit(RLIMIT_CORE, &no_core);
        raise(SIGSEGV);
      },
      testing::KilledBySignal(SIGSEGV), "");
  const std::string text = read_file(path);
  EXPECT_NE(text.find("\"reason\": \"signal SIGSEGV\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"seq\": 4, \"group\": \"world\", \"op\": \"broadcast\", \"count\": 1004"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"state\": \"started\"}\n]}\n"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}
