// NcclComm on real GPUs (run with 1 rank, and with 2 where there are 2 GPUs):
// the collectives, the bucket groups, and the one-rank-per-GPU rule. Every
// test skips, visibly, on a machine without a GPU or in a CPU-only build;
// tests/e2e/dist_nccl.sh turns "all skipped" into exit 77.
//
// NCCL picks its algorithm by size and topology, so unlike MpiComm its sums
// are compared with a tolerance (float32: 1e-6 relative per rank added),
// except where the result is exact (integers, Max, power-of-two Avg of
// small integers).
#include <cmath>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/error.h"
#include "dist/devices.h"
#include "dist/grad_reducer.h"
#include "harness.h"

using hpc::Device;
using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using hpc::dist::ReduceOp;

namespace {

class Nccl : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    hpc::dist::Context& ctx = mpitest::ctx();
    if (!hpc::backend::cuda_built()) {
      skip_ = "this build has no CUDA (CPU-only)";
      return;
    }
    const int gpus = hpc::backend::cuda_device_count();
    if (gpus == 0) {
      skip_ = "no GPU is visible";
      return;
    }
    if (ctx.info().local_size > gpus) {
      // Exactly the error the rule promises, on every rank, before NCCL is touched.
      try {
        ctx.make_nccl_comm();
        ADD_FAILURE() << "more ranks than GPUs was accepted";
      } catch (const hpc::UserError& e) {
        EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
      }
      skip_ = std::to_string(ctx.info().local_size) + " ranks on " + std::to_string(gpus) + " GPU(s)";
      return;
    }
    hpc::backend::cuda_set_device(hpc::dist::pick_device(ctx.info().local_rank, gpus));
    comm_ = ctx.make_nccl_comm().release();
  }
  static void TearDownTestSuite() {
    delete comm_;
    comm_ = nullptr;
  }
  void SetUp() override {
    if (comm_ == nullptr) GTEST_SKIP() << skip_;
  }

  static Tensor device_copy(const Tensor& host) {
    Tensor d(host.shape(), host.dtype(), Device::CUDA);
    hpc::backend::copy(host, d);
    return d;
  }
  static Tensor host_copy(const Tensor& dev) {
    Tensor h(dev.shape(), dev.dtype());
    hpc::backend::copy(dev, h);
    return h;
  }

  static hpc::dist::Communicator* comm_;
  static std::string skip_;
};
hpc::dist::Communicator* Nccl::comm_ = nullptr;
std::string Nccl::skip_;

float value(int r, int64_t i) { return static_cast<float>((r + 1) * 1000 + i % 97) * 0.25f; }

}  // namespace

TEST_F(Nccl, AllreduceSumAvgMax) {
  const int world = comm_->size(), rank = comm_->rank();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    Tensor h(Shape{100003}, DType::F32);
    for (int64_t i = 0; i < h.count(); ++i) h.data<float>()[i] = value(rank, i);
    Tensor d = device_copy(h);
    comm_->allreduce(d, op);
    Tensor out = host_copy(d);
    int64_t bad = 0;
    for (int64_t i = 0; i < h.count(); ++i) {
      double want = op == ReduceOp::Max ? value(world - 1, i) : 0;
      if (op != ReduceOp::Max)
        for (int r = 0; r < world; ++r) want += value(r, i);
      if (op == ReduceOp::Avg) want /= world;
      bad += std::fabs(out.data<float>()[i] - want) > 1e-6 * world * std::fabs(want);
    }
    EXPECT_EQ(bad, 0) << "op " << static_cast<int>(op);
  }
}

TEST_F(Nccl, GroupedBucketsBroadcastAllgatherBarrier) {
  const int world = comm_->size(), rank = comm_->rank();
  std::vector<Tensor> host, dev;
  for (int k = 0; k < 5; ++k) {
    host.emplace_back(Shape{(int64_t{1} << (2 * k)) + 3}, DType::I32);
    for (int64_t i = 0; i < host.back().count(); ++i) host.back().data<int32_t>()[i] = rank + 1;
    dev.push_back(device_copy(host.back()));
  }
  auto reqs = comm_->allreduce_group(dev, ReduceOp::Sum);
  ASSERT_EQ(reqs.size(), dev.size());
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) (*it)->wait();
  for (const Tensor& d : dev) {
    Tensor h = host_copy(d);
    for (int64_t i = 0; i < h.count(); ++i) ASSERT_EQ(h.data<int32_t>()[i], world * (world + 1) / 2);
  }
  Tensor b(Shape{7}, DType::F32);
  for (int i = 0; i < 7; ++i) b.data<float>()[i] = rank == 0 ? float(i) : -1.f;
  Tensor bd = device_copy(b);
  comm_->broadcast(bd, 0);
  Tensor bh = host_copy(bd);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(bh.data<float>()[i], float(i));
  Tensor s(Shape{2}, DType::F32);
  s.data<float>()[0] = float(rank);
  s.data<float>()[1] = float(-rank);
  Tensor recv(Shape{2 * world}, DType::F32, Device::CUDA);
  comm_->allgather(device_copy(s), recv);
  Tensor rh = host_copy(recv);
  for (int r = 0; r < world; ++r) EXPECT_EQ(rh.data<float>()[2 * r], float(r));
  comm_->barrier();
}

TEST_F(Nccl, GradReducerOverDeviceGradients) {
  const int world = comm_->size(), rank = comm_->rank();
  Tensor h(Shape{50000}, DType::F32);
  for (int64_t i = 0; i < h.count(); ++i) h.data<float>()[i] = value(rank, i);
  Tensor g = device_copy(h);
  hpc::dist::GradReducer red(*comm_, g, 4096, {0, 1000, 20000, 49000});
  red.begin();
  for (int64_t f : {49000, 20000, 1000, 0}) red.on_ready(f);
  red.finish();
  Tensor out = host_copy(g);
  int64_t bad = 0;
  for (int64_t i = 0; i < h.count(); ++i) {
    double want = 0;
    for (int r = 0; r < world; ++r) want += value(r, i);
    want /= world;
    bad += std::fabs(out.data<float>()[i] - want) > 1e-6 * world * std::fabs(want);
  }
  EXPECT_EQ(bad, 0);
}

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
