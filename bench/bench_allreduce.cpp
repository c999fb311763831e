// Benchmark: hpctrain's AllReduce against raw MPI_Allreduce on the same buffers.
//
// nccl-tests style: versions and one line per rank, then for each series a
// table `size count type | time algbw busbw`, with busbw = algbw·2(n−1)/n
// (the bytes each rank must move in a bandwidth-optimal allreduce, so
// numbers compare across rank counts). Series:
//   MPI_Allreduce         the MPI library's blocking allreduce, in place
//   hpctrain-allreduce    MpiComm::allreduce (what SyncBN and metrics use)
//   MPI-4-buckets         the buffer as 4 slices, one MPI_Allreduce each, then
//                         scaled by 1/n: a gradient average done with MPI
//   hpctrain-4-buckets    the same 4 slices started together and then waited
//                         for (what GradReducer does), Avg
//   hpctrain-native       MpiComm::allreduce with dist.reduce native (the MPI
//                         library's MPI_Iallreduce, waited for against the deadline)
// hpctrain-allreduce is compared with MPI_Allreduce, hpctrain-4-buckets with
// MPI-4-buckets (the same buffers: four smaller reductions cost more than one
// big one whoever does them).
// All float32 sums, from 4 KiB to 64 MiB. The variants run interleaved (for
// every size, R rounds of A B C D), and each row is the median of its rounds:
// machine drift hits all alike. A time is the slowest rank's. Timed loops
// reduce zeros (stays finite); correctness is checked separately on values
// whose sums are exact, and a wrong result fails the run (exit 1).
//
//   mpirun -np N build/bench/bench_allreduce [--quick] [--min BYTES] [--max BYTES]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/context.h"
#include "dist/grad_reducer.h"
#include "dist/mpi_comm.h"

using namespace hpc;

namespace {

struct Series {
  const char* name;
  std::function<void(const Tensor&)> run;
  bool avg;                     // the result is the average (else the sum)
  std::vector<double> seconds;  // per size: median over rounds
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of op on buf, slowest rank.
double time_op(const std::function<void(const Tensor&)>& op, const Tensor& buf, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) op(buf);
  double t = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

// Values whose float sums over ranks are exact in any order: small integers.
int64_t wrong_results(const std::function<void(const Tensor&)>& op, Tensor& buf, int rank, int world,
                      bool avg) {
  float* x = buf.data<float>();
  for (int64_t i = 0; i < buf.count(); ++i) x[i] = static_cast<float>(rank + 1 + i % 13);
  op(buf);
  int64_t wrong = 0;
  for (int64_t i = 0; i < buf.count(); ++i) {
    double want = world * (world + 1) / 2.0 + static_cast<double>(world) * static_cast<double>(i % 13);
    if (avg) want /= world;
    wrong += static_cast<double>(x[i]) != static_cast<float>(want);
  }
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return wrong;
}

// The 4 buckets of a buffer (contiguous, nearly equal).
std::vector<Tensor> buckets(const Tensor& b) {
  const int64_t n = b.count(), k = 4;
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < k; ++i) parts.push_back(b.slice(n * i / k, Shape{n * (i + 1) / k - n * i / k}));
  return parts;
}

int64_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1048576;
  return static_cast<int64_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t min_bytes = 4096, max_bytes = 64 << 20;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      max_bytes = 4 << 20;
      rounds = 3;
    } else if (!std::strcmp(argv[i], "--min") && i + 1 < argc) {
      min_bytes = parse_size(argv[++i]);
    } else if (!std::strcmp(argv[i], "--max") && i + 1 < argc) {
      max_bytes = parse_size(argv[++i]);
    }
  }
  DistConfig dc;
  dc.timeout = 600;
  dist::Context ctx(&argc, &argv, dc);
  const int rank = ctx.rank(), world = ctx.world();
  dist::Communicator& comm = ctx.host_comm();

  char line[256];
  std::snprintf(line, sizeof line, "#  rank %3d  host %-20s pid %-8d local rank %d/%d  device cpu", rank,
                ctx.info().host.c_str(), ctx.info().pid, ctx.info().local_rank, ctx.info().local_size);
  std::vector<std::string> lines = ctx.gather_lines(line);
  if (rank == 0) {
    std::printf("# hpctrain bench_allreduce: float32, in place, %d rank(s) on %d node(s), communicator %s\n",
                world, ctx.info().num_nodes, comm.name().c_str());
    std::string v = version_report();
    for (size_t p = 0, q; p < v.size(); p = q + 1) {
      q = v.find('\n', p);
      if (q == std::string::npos) q = v.size();
      std::printf("# %s\n", v.substr(p, q - p).c_str());
    }
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
    std::fflush(stdout);
  }

  auto* mpi = dynamic_cast<dist::MpiComm*>(&comm);
  std::vector<Series> series = {
      {"MPI_Allreduce",
       [](const Tensor& b) {
         MPI_Allreduce(MPI_IN_PLACE, b.raw(), static_cast<int>(b.count()), MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD);
       },
       false,
       {}},
      {"hpctrain-allreduce", [&](const Tensor& b) { comm.allreduce(b, dist::ReduceOp::Sum); }, false, {}},
      {"MPI-4-buckets",
       [world](const Tensor& b) {
         for (const Tensor& part : buckets(b)) {
           MPI_Allreduce(MPI_IN_PLACE, part.raw(), static_cast<int>(part.count()), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD);
           float* x = part.data<float>();
           const auto div = static_cast<float>(world);
           for (int64_t i = 0, n = part.count(); i < n; ++i) x[i] /= div;
         }
       },
       true,
       {}},
      {"hpctrain-4-buckets",
       [&](const Tensor& b) {
         // Like GradReducer: 4 buckets started together (one group), then waited for in order.
         for (auto& r : comm.allreduce_group(buckets(b), dist::ReduceOp::Avg)) r->wait();
       },
       true,
       {}}};
  if (mpi != nullptr)  // one rank has no MPI communicator
    series.push_back({"hpctrain-native",
                      [mpi](const Tensor& b) {
                        mpi->set_native_reduce(true);
                        mpi->allreduce(b, dist::ReduceOp::Sum);
                        mpi->set_native_reduce(false);
                      },
                      false,
                      {}});

  std::vector<int64_t> sizes;
  for (int64_t s = min_bytes; s <= max_bytes; s *= 2) sizes.push_back(s);
  int64_t wrong = 0;
  for (int64_t bytes : sizes) {
    Tensor buf(Shape{bytes / 4}, DType::F32);
    // About 64 MiB of traffic per timed loop, at least 3 and at most 1000 calls.
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / bytes, 3, 1000));
    std::vector<std::vector<double>> t(series.size());
    for (Series& s : series) time_op(s.run, buf, 2);  // warm-up: first touch, connections
    for (int r = 0; r < rounds; ++r)
      for (size_t v = 0; v < series.size(); ++v) t[v].push_back(time_op(series[v].run, buf, iters));
    for (size_t v = 0; v < series.size(); ++v) {
      series[v].seconds.push_back(median(t[v]));
      wrong += wrong_results(series[v].run, buf, rank, world, series[v].avg);
      std::memset(buf.raw(), 0, buf.num_bytes());
    }
  }

  if (rank == 0) {
    const double bus = world > 1 ? 2.0 * (world - 1) / world : 1.0;
    for (const Series& s : series) {
      std::printf("#\n# series: %s\n", s.name);
      std::printf("# %10s %12s %6s | %10s %10s %10s\n", "size(B)", "count", "type", "time(us)", "algbw",
                  "busbw");
      std::printf("# %10s %12s %6s | %10s %10s %10s\n", "", "(elems)", "", "", "(GB/s)", "(GB/s)");
      for (size_t i = 0; i < sizes.size(); ++i) {
        const double sec = s.seconds[i], algbw = static_cast<double>(sizes[i]) / sec / 1e9;
        std::printf("  %10lld %12lld %6s | %10.1f %10.3f %10.3f\n", static_cast<long long>(sizes[i]),
                    static_cast<long long>(sizes[i] / 4), "float", sec * 1e6, algbw, algbw * bus);
      }
    }
    std::printf(
        "#\n# hpctrain time / MPI time on the same buffers (≤ 1 is as fast or faster; target ≤ 1.05 at >= 1 "
        "MiB)\n");
    const bool native = series.size() > 4;
    std::printf("# %10s %20s %20s%s\n", "size(B)", "allreduce", "4-buckets",
                native ? "   native/MPI_Allreduce" : "");
    std::vector<double> big1, big4;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double r1 = series[1].seconds[i] / series[0].seconds[i],
                   r4 = series[3].seconds[i] / series[2].seconds[i];
      std::printf("# %10lld %20.3f %20.3f", static_cast<long long>(sizes[i]), r1, r4);
      if (native) std::printf(" %22.3f", series[4].seconds[i] / series[0].seconds[i]);
      std::printf("\n");
      if (sizes[i] >= (1 << 20)) {
        big1.push_back(r1);
        big4.push_back(r4);
      }
    }
    if (!big1.empty())
      std::printf(
          "# at >= 1 MiB: hpctrain-allreduce worst %.3f median %.3f; hpctrain-4-buckets worst %.3f median "
          "%.3f\n",
          *std::max_element(big1.begin(), big1.end()), median(big1),
          *std::max_element(big4.begin(), big4.end()), median(big4));
    std::printf("# results checked: %lld wrong\n", static_cast<long long>(wrong));
  }
  return wrong == 0 ? 0 : 1;
}
