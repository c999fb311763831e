// The shared main() of the MPI test programs (tests/mpi/*.cpp), run as
// `mpirun -np N build/tests/mpi/NAME` by tests/e2e/dist_*.sh.
//
// GoogleTest runs on every rank; every rank executes every test body, so
// the collectives line up. Rank 0 prints the usual report; the other ranks
// print only their failures, prefixed with the rank. A test that fails on
// one rank fails the program: the exit codes are max-reduced. Test bodies
// should use EXPECT (not ASSERT) around collectives, so that a failure on
// one rank does not skip a collective the others are waiting in (which
// would end in a dist.timeout, not a hang, but hide the real failure).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>

#include "dist/context.h"

namespace mpitest {

inline hpc::dist::Context*& context_slot() {
  static hpc::dist::Context* ctx = nullptr;
  return ctx;
}
inline hpc::dist::Context& ctx() { return *context_slot(); }

// Rank r's input element i for the collective tests: magnitudes from 1e-3 to 1e5 and both signs, so that
// float sums depend on order. Not inlined: the compiler may fuse an inlined product with a reference's
// sum into an FMA (GCC contracts by default in C++), which would round differently from the
// communicator's adds. A table, not pow(): a vectorised pow in a fill loop could differ by an ulp.
[[gnu::noinline]] inline double input(int r, int64_t i) {
  const uint64_t h =
      (static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull);
  static constexpr double SCALE[9] = {1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3, 1e4, 1e5};
  const double mant = static_cast<double>(h % 100003) / 100003.0 - 0.37;
  return mant * SCALE[(h >> 20) % 9];
}

// Failures only, tagged with the rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

// Call from main(): MPI via dist::Context (dist.timeout = timeout_s), the tests, an agreed exit code.
inline int run_all(int argc, char** argv, double timeout_s) {
  testing::InitGoogleTest(&argc, argv);
  hpc::DistConfig cfg;
  cfg.timeout = timeout_s;
  int code = 0;
  {
    hpc::dist::Context ctx(&argc, &argv, cfg);
    context_slot() = &ctx;
    if (ctx.rank() != 0) {
      testing::TestEventListeners& l = testing::UnitTest::GetInstance()->listeners();
      delete l.Release(l.default_result_printer());
      l.Append(new RankFailurePrinter(ctx.rank()));
    }
    code = RUN_ALL_TESTS();
    MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    context_slot() = nullptr;
  }
  return code;
}

}  // namespace mpitest
