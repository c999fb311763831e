// ZeRO's sharded collectives on real ranks (run with 2, 3, 4 and 10).
//
// The reduce-scatter promises the allreduce's bits in each rank's own
// shard, for any shard boundaries (uneven, empty, unaligned) and any
// bucketing: every element is folded by its owner in rank order. The
// all-gather is a copy, so it must be exact too. Inputs mix magnitudes so
// that another summation order would give other bits.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "dist/grad_reducer.h"
#include "dist/mpi_comm.h"
#include "dist/shards.h"
#include "harness.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::dist::ReduceOp;

namespace {

hpc::dist::Communicator& comm() { return mpitest::ctx().host_comm(); }

using mpitest::input;

template <typename T>
void fill(const Tensor& t, int r) {
  for (int64_t i = 0; i < t.count(); ++i) t.data<T>()[i] = static_cast<T>(input(r, i));
}

// Elements of [lo, hi) where a and b differ in any bit.
int64_t differing(const Tensor& a, const Tensor& b, int64_t lo, int64_t hi) {
  const size_t es = hpc::dtype_size(a.dtype());
  int64_t bad = 0;
  for (int64_t i = lo; i < hi; ++i)
    bad += std::memcmp(static_cast<const char*>(a.raw()) + static_cast<size_t>(i) * es,
                       static_cast<const char*>(b.raw()) + static_cast<size_t>(i) * es, es) != 0;
  return bad;
}

// Shard bounds of several shapes for n elements over `world` ranks.
std::vector<std::vector<int64_t>> bound_sets(int64_t n, int world) {
  std::vector<std::vector<int64_t>> out = {hpc::dist::shard_bounds(n, world),
                                           hpc::dist::shard_bounds(n, world, 1)};
  std::vector<int64_t> skewed(static_cast<size_t>(world) + 1, n);  // rank 0 owns everything
  skewed[0] = 0;
  out.push_back(skewed);
  std::vector<int64_t> last(static_cast<size_t>(world) + 1, 0);  // the last rank owns everything
  last.back() = n;
  out.push_back(last);
  return out;
}

template <typename T>
void check_reduce_scatter(ReduceOp op, DType dt) {
  const int world = comm().size(), rank = comm().rank();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{1000}, int64_t{40013}}) {
    Tensor want(Shape{n}, dt);
    fill<T>(want, rank);
    comm().allreduce(want, op);
    for (const auto& b : bound_sets(n, world)) {
      Tensor got(Shape{n}, dt);
      fill<T>(got, rank);
      comm().reduce_scatter(got, op, b);
      EXPECT_EQ(differing(got, want, b[static_cast<size_t>(rank)], b[static_cast<size_t>(rank) + 1]), 0)
          << "n=" << n << " op=" << static_cast<int>(op);
    }
  }
}

}  // namespace

TEST(Shards, BoundsAreAlignedContiguousAndCoverEverything) {
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{16}, int64_t{100}, int64_t{670730}})
    for (int w : {1, 2, 3, 4, 7, 64}) {
      const std::vector<int64_t> b = hpc::dist::shard_bounds(n, w);
      ASSERT_EQ(b.size(), static_cast<size_t>(w) + 1);
      EXPECT_EQ(b.front(), 0);
      EXPECT_EQ(b.back(), n);
      int64_t smallest = n, largest = 0;
      for (int r = 0; r < w; ++r) {
        const int64_t c = b[static_cast<size_t>(r) + 1] - b[static_cast<size_t>(r)];
        EXPECT_GE(c, 0);
        if (b[static_cast<size_t>(r)] < n) {
          EXPECT_EQ(b[static_cast<size_t>(r)] % hpc::dist::SHARD_ALIGN, 0);
        }
        smallest = std::min(smallest, c);
        largest = std::max(largest, c);
      }
      EXPECT_LE(largest - smallest, hpc::dist::SHARD_ALIGN) << "n=" << n << " w=" << w;
    }
  const std::vector<int64_t> in = hpc::dist::shard_bounds_within({0, 32, 64, 100}, 40, 90);
  EXPECT_EQ(in, (std::vector<int64_t>{0, 0, 24, 50}));
}

TEST(MpiComm, ReduceScatterIsTheAllreduceBitsInEachShard) {
  check_reduce_scatter<float>(ReduceOp::Avg, DType::F32);
  check_reduce_scatter<float>(ReduceOp::Sum, DType::F32);
  check_reduce_scatter<double>(ReduceOp::Avg, DType::F64);
  check_reduce_scatter<float>(ReduceOp::Max, DType::F32);
}

TEST(MpiComm, AllgatherShardsCopiesEveryShardExactly) {
  const int world = comm().size(), rank = comm().rank();
  for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{1000}, int64_t{70001}})
    for (const auto& b : bound_sets(n, world)) {
      Tensor t(Shape{n}, DType::F32), want(Shape{n}, DType::F32);
      for (int q = 0; q < world; ++q)
        for (int64_t i = b[static_cast<size_t>(q)]; i < b[static_cast<size_t>(q) + 1]; ++i)
          want.data<float>()[i] = static_cast<float>(input(q, i));
      for (int64_t i = 0; i < n; ++i)  // mine where I own it, garbage elsewhere
        t.data<float>()[i] = i >= b[static_cast<size_t>(rank)] && i < b[static_cast<size_t>(rank) + 1]
                                 ? static_cast<float>(input(rank, i))
                                 : -1e30f;
      comm().allgather_shards(t, b);
      EXPECT_EQ(differing(t, want, 0, n), 0) << "n=" << n;
    }
}

TEST(GradReducer, ShardedBucketsGiveEachRankTheAllreduceBitsOfItsShard) {
  const int world = comm().size(), rank = comm().rank();
  const int64_t n = 20000;
  const std::vector<int64_t> layers = {0, 40, 1000, 1040, 9000, 9100, 17000};
  Tensor expect(Shape{n}, DType::F32);
  fill<float>(expect, rank);
  comm().allreduce(expect, ReduceOp::Avg);
  const std::vector<int64_t> shards = hpc::dist::shard_bounds(n, world);
  const int64_t lo = shards[static_cast<size_t>(rank)], hi = shards[static_cast<size_t>(rank) + 1];
  struct Variant {
    const char* name;
    double bytes;
    std::vector<int64_t> cuts;
    bool overlap;
  };
  for (const Variant& v : std::vector<Variant>{{"one bucket", 1e12, layers, true},
                                               {"one per tensor", 1, layers, true},
                                               {"tiny, cut anywhere", 1000, {}, true},
                                               {"no overlap", 1, layers, false}}) {
    Tensor g(Shape{n}, DType::F32);
    fill<float>(g, rank);
    hpc::dist::GradReducer red(comm(), g, v.bytes, v.cuts, v.overlap, shards);
    red.begin();
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      red.on_ready(*it);
      double stat[3] = {1.0 * rank, 2.0, 3.0};  // a SyncBN-like allreduce between buckets
      comm().allreduce(Tensor::borrow(stat, Shape{3}, DType::F64), ReduceOp::Sum);
    }
    red.finish();
    EXPECT_EQ(differing(g, expect, lo, hi), 0) << v.name;
    // The "parameters": my shard updated (here: the reduced gradients), everyone's gathered.
    Tensor p(Shape{n}, DType::F32);
    std::memcpy(static_cast<char*>(p.raw()) + lo * 4, static_cast<char*>(g.raw()) + lo * 4,
                static_cast<size_t>(hi - lo) * 4);
    red.allgather_params(p);
    EXPECT_EQ(differing(p, expect, 0, n), 0) << v.name;
  }
}

TEST(MpiComm, NativeReductionsAreTheLibrarysToRounding) {
  // dist.reduce native: MPI_Iallreduce / MPI_Ireduce_scatter. Not bitwise the ordered result in
  // general (the library picks the order), so a tolerance; the shard must land at its own offset.
  auto* mpi = dynamic_cast<hpc::dist::MpiComm*>(&comm());
  ASSERT_NE(mpi, nullptr);
  const int world = comm().size(), rank = comm().rank();
  const int64_t n = 300007;
  Tensor want(Shape{n}, DType::F64);
  fill<double>(want, rank);
  comm().allreduce(want, ReduceOp::Avg);
  mpi->set_native_reduce(true);
  Tensor all(Shape{n}, DType::F64), rs(Shape{n}, DType::F64);
  fill<double>(all, rank);
  fill<double>(rs, rank);
  comm().allreduce(all, ReduceOp::Avg);
  const std::vector<int64_t> b = hpc::dist::shard_bounds(n, world);
  comm().reduce_scatter(rs, ReduceOp::Avg, b);
  mpi->set_native_reduce(false);
  int64_t far = 0, far_rs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = want.data<double>()[i];
    far += std::abs(all.data<double>()[i] - w) > 1e-12 * (1e5 + std::abs(w));
    if (i >= b[static_cast<size_t>(rank)] && i < b[static_cast<size_t>(rank) + 1])
      far_rs += std::abs(rs.data<double>()[i] - w) > 1e-12 * (1e5 + std::abs(w));
  }
  EXPECT_EQ(far, 0);
  EXPECT_EQ(far_rs, 0);
  if (rank == 0)
    std::printf("  native vs ordered, %d ranks: %lld of %lld elements differ in the last bits\n", world,
                static_cast<long long>(differing(all, want, 0, n)), static_cast<long long>(n));
}

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
