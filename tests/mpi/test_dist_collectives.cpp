// MpiComm and GradReducer on real ranks (run with 2, 3 and 4).
//
// The allreduce promises bits, not tolerances: every element is reduced in
// rank order, ((x₀ ∘ x₁) ∘ x₂) ∘ …, then divided once for an average. Each
// rank can compute every rank's input, so the expected result is computed
// locally in exactly that order and compared bit for bit. The inputs mix
// magnitudes so that another summation order would give other bits.
#include <cmath>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "dist/grad_reducer.h"
#include "dist/mpi_comm.h"
#include "dist/rank_order_allreduce.h"
#include "harness.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::dist::ReduceOp;

namespace {

hpc::dist::Communicator& comm() { return mpitest::ctx().host_comm(); }

using mpitest::input;

template <typename T>
void fill(Tensor& t, int r) {
  for (int64_t i = 0; i < t.count(); ++i)
    t.data<T>()[i] = static_cast<T>(r == 0 && i % 5 == 0 ? -input(r, i) : input(r, i));
}

template <typename T>
T reference(int world, int64_t i, ReduceOp op) {
  auto x = [&](int r) { return static_cast<T>(r == 0 && i % 5 == 0 ? -input(r, i) : input(r, i)); };
  T acc = x(0);
  for (int r = 1; r < world; ++r)
    acc = op == ReduceOp::Max ? (acc < x(r) ? x(r) : acc) : static_cast<T>(acc + x(r));
  if (op == ReduceOp::Avg) acc = acc / static_cast<T>(world);
  return acc;
}

template <typename T>
int64_t mismatches(const Tensor& t, int world, ReduceOp op) {
  int64_t bad = 0;
  for (int64_t i = 0; i < t.count(); ++i) {
    T want = reference<T>(world, i, op);
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the point
    if (std::memcmp(&t.data<T>()[i], &want, sizeof(T)) != 0) {
      if (bad == 0)
        ADD_FAILURE() << "element " << i << " of " << t.count() << ": got " << t.data<T>()[i] << ", want "
                      << want;
      ++bad;
    }
  }
  return bad;
}

DType dtype_of(float) { return DType::F32; }
DType dtype_of(double) { return DType::F64; }
DType dtype_of(int32_t) { return DType::I32; }

template <typename T>
void check_allreduce(ReduceOp op) {
  const int world = comm().size(), rank = comm().rank();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{world - 1}, int64_t{world}, int64_t{7}, int64_t{1000},
                    int64_t{65537}}) {
    Tensor t(Shape{n}, dtype_of(T{}));
    fill<T>(t, rank);
    comm().allreduce(t, op);
    EXPECT_EQ(mismatches<T>(t, world, op), 0) << "n=" << n << " op=" << static_cast<int>(op);
  }
}

}  // namespace

TEST(MpiComm, AllreduceIsTheRankOrderReductionBitForBit) {
  check_allreduce<float>(ReduceOp::Sum);
  check_allreduce<float>(ReduceOp::Avg);
  check_allreduce<float>(ReduceOp::Max);
  check_allreduce<double>(ReduceOp::Sum);
  check_allreduce<double>(ReduceOp::Avg);
  check_allreduce<int32_t>(ReduceOp::Sum);
  check_allreduce<int32_t>(ReduceOp::Max);
}

TEST(MpiComm, ManyInFlightCompleteInAnyWaitOrder) {
  const int world = comm().size(), rank = comm().rank();
  std::vector<Tensor> bufs;
  std::vector<std::unique_ptr<hpc::dist::Request>> reqs;
  for (int k = 0; k < 12; ++k) {
    bufs.emplace_back(Shape{int64_t{1} << (k + 2)}, DType::F32);
    fill<float>(bufs.back(), rank);
    reqs.push_back(comm().allreduce_async(bufs.back(), ReduceOp::Avg));
  }
  for (int k = 11; k >= 0; --k) reqs[static_cast<size_t>(k)]->wait();
  for (const Tensor& t : bufs) EXPECT_EQ(mismatches<float>(t, world, ReduceOp::Avg), 0);
}

TEST(MpiComm, BuffersAboveTheMessageLimitTravelInPieces) {
  // The same code path as counts above INT_MAX, at a size a test can afford.
  auto* mpi = dynamic_cast<hpc::dist::MpiComm*>(&comm());
  ASSERT_NE(mpi, nullptr);
  const int world = comm().size(), rank = comm().rank();
  mpi->set_max_message(7);
  Tensor t(Shape{1000}, DType::F32);
  fill<float>(t, rank);
  comm().allreduce(t, ReduceOp::Sum);
  EXPECT_EQ(mismatches<float>(t, world, ReduceOp::Sum), 0);
  Tensor b(Shape{100}, DType::F64);
  for (int64_t i = 0; i < 100; ++i) b.data<double>()[i] = rank == world - 1 ? input(0, i) : 0.0;
  comm().broadcast(b, world - 1);
  int64_t bad = 0;
  for (int64_t i = 0; i < 100; ++i) bad += b.data<double>()[i] != input(0, i);
  EXPECT_EQ(bad, 0);
  // An allgather cannot be split that way: it is refused, on every rank, before any message.
  Tensor send(Shape{8}, DType::F32), recv(Shape{8 * world}, DType::F32);
  EXPECT_THROW(comm().allgather(send, recv), hpc::Error);
  mpi->set_max_message(INT_MAX);
}

TEST(MpiComm, BroadcastAllgatherBarrierGather) {
  const int world = comm().size(), rank = comm().rank();
  Tensor b(Shape{5}, DType::I32);
  for (int i = 0; i < 5; ++i) b.data<int32_t>()[i] = rank == 1 ? 10 + i : -1;
  comm().broadcast(b, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.data<int32_t>()[i], 10 + i);
  Tensor send(Shape{2}, DType::F64), recv(Shape{2 * world}, DType::F64);
  send.data<double>()[0] = rank;
  send.data<double>()[1] = -rank;
  comm().allgather(send, recv);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(recv.data<double>()[2 * r], r);
    EXPECT_EQ(recv.data<double>()[2 * r + 1], -r);
  }
  comm().barrier();
  std::vector<std::string> lines = mpitest::ctx().gather_lines(std::string(static_cast<size_t>(rank), 'x'));
  if (rank == 0) {
    ASSERT_EQ(static_cast<int>(lines.size()), world);
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(lines[static_cast<size_t>(r)], std::string(static_cast<size_t>(r), 'x'));
  }
}

TEST(Context, AgreeOnFailureNamesTheLowestFailingRank) {
  const int rank = comm().rank();
  auto [lowest, code] = mpitest::ctx().agree_on_failure(rank >= 1 ? 2 + rank : 0);
  EXPECT_EQ(lowest, 1);
  EXPECT_EQ(code, 1 + comm().size());
  auto [none, zero] = mpitest::ctx().agree_on_failure(0);
  EXPECT_EQ(none, -1);
  EXPECT_EQ(zero, 0);
}

TEST(GradReducer, AnyBucketingGivesTheSameBits) {
  const int world = comm().size(), rank = comm().rank();
  const int64_t n = 20000;
  const std::vector<int64_t> layers = {0, 40, 1000, 1040, 9000, 9100, 17000};  // "parameter" offsets
  Tensor expect(Shape{n}, DType::F32);
  fill<float>(expect, rank);
  comm().allreduce(expect, ReduceOp::Avg);
  EXPECT_EQ(mismatches<float>(expect, world, ReduceOp::Avg), 0);

  struct Variant {
    const char* name;
    double bytes;
    std::vector<int64_t> cuts;
    bool overlap;
  };
  const std::vector<Variant> variants = {{"one bucket", 1e12, layers, true},
                                         {"one per tensor", 1, layers, true},
                                         {"a few tensors each", 16000, layers, true},
                                         {"tiny, cut anywhere", 1000, {}, true},
                                         {"no overlap", 1, layers, false}};
  for (const Variant& v : variants) {
    Tensor g(Shape{n}, DType::F32);
    fill<float>(g, rank);
    hpc::dist::GradReducer red(comm(), g, v.bytes, v.cuts, v.overlap);
    red.begin();
    // Backward's frontier moves down the layer starts; a SyncBN-like allreduce runs in between.
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      red.on_ready(*it);
      double stat[3] = {1.0 * rank, 2.0, 3.0};
      comm().allreduce(Tensor::borrow(stat, Shape{3}, DType::F64), ReduceOp::Sum);
    }
    red.finish();
    EXPECT_EQ(std::memcmp(g.raw(), expect.raw(), g.num_bytes()), 0)
        << v.name << ": " << red.num_buckets() << " buckets";
  }
}

TEST(MpiComm, AcrossNodesBucketsAllInFlightAndPiecesGiveTheSameBits) {
  // Every rank its own "node": buckets are all posted at once and messages between ranks go in
  // pieces of at most REMOTE_PIECE_BYTES. The bits must be those of one bucket at a time.
  auto* mpi = dynamic_cast<hpc::dist::MpiComm*>(&comm());
  ASSERT_NE(mpi, nullptr);
  const int world = comm().size(), rank = comm().rank();
  const int64_t piece = hpc::dist::RankOrderAllreduce::REMOTE_PIECE_BYTES / 4;
  // Chunks of several pieces and a ragged last one, above the one-round size.
  const int64_t n = 7 * piece * world + 13;
  const std::vector<int64_t> layers = {0, piece / 3, 2 * piece * world, 5 * piece * world + 1, n - 40};
  Tensor expect(Shape{n}, DType::F32);
  fill<float>(expect, rank);
  comm().allreduce(expect, ReduceOp::Avg);
  ASSERT_EQ(mismatches<float>(expect, world, ReduceOp::Avg), 0);

  mpi->set_test_node_size(1);
  for (bool overlap : {true, false}) {
    Tensor g(Shape{n}, DType::F32);
    fill<float>(g, rank);
    hpc::dist::GradReducer red(comm(), g, 1, layers, overlap);
    ASSERT_EQ(red.num_buckets(), static_cast<int>(layers.size()));
    red.begin();
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      red.on_ready(*it);
      double stat[3] = {1.0 * rank, 2.0, 3.0};  // a SyncBN-like allreduce between buckets
      comm().allreduce(Tensor::borrow(stat, Shape{3}, DType::F64), ReduceOp::Sum);
      EXPECT_EQ(stat[0], world * (world - 1) / 2.0);
    }
    red.finish();
    EXPECT_EQ(std::memcmp(g.raw(), expect.raw(), g.num_bytes()), 0) << "overlap " << overlap;
  }
  // Many in flight, waited for newest first; doubles and sums take the piece path too.
  std::vector<Tensor> bufs;
  std::vector<std::unique_ptr<hpc::dist::Request>> reqs;
  for (int k = 0; k < 6; ++k) {
    bufs.emplace_back(Shape{piece * (k + 1) * world / 2 + k}, DType::F64);
    fill<double>(bufs.back(), rank);
    reqs.push_back(comm().allreduce_async(bufs.back(), ReduceOp::Sum));
  }
  for (int k = 5; k >= 0; --k) reqs[static_cast<size_t>(k)]->wait();
  for (const Tensor& t : bufs) EXPECT_EQ(mismatches<double>(t, world, ReduceOp::Sum), 0);
  mpi->set_test_node_size(0);
}

TEST(MpiComm, AMissingPeerIsAPeerErrorNotAHang) {
  // A separate communicator: the collective left behind must not disturb the others' order.
  hpc::dist::MpiComm lonely(MPI_COMM_WORLD, 0.5);
  const int rank = comm().rank();
  if (rank == 0) {
    float x = 1;
    const double t0 = MPI_Wtime();
    try {
      lonely.allreduce(Tensor::borrow(&x, Shape{1}, DType::F32), ReduceOp::Sum);
      ADD_FAILURE() << "an allreduce without its peers completed";
    } catch (const hpc::PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("dist.timeout"), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), hpc::EXIT_PEER);
    }
    EXPECT_LT(MPI_Wtime() - t0, 5.0);
  }
  comm().barrier();
}

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
