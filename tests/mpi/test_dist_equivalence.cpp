// Data parallelism is exact: W ranks with b samples each train the same
// model as one process with W·b samples (run with 2 and 4 ranks).
//
// Each test trains a small model for a few steps the way the trainer does
// (forward, loss normalised by the rank's samples, backward handing buckets
// to a GradReducer, Avg allreduce, optimizer), and rank 0 trains the
// reference: one process, the concatenated batch, no communication. The
// synthetic samples are a pure function of their id, so rank r's micro-batch
// m of step s is exactly rows [r·b, (r+1)·b) of the reference's micro-batch m.
//
// Tolerances: float32 parameters may differ only by summation order (a
// rank-order allreduce instead of one long sum; per-rank BN sums) — about
// 1e-7 relative per operation, grown over a few steps to ~1e-6. The checks
// allow 1e-5 + 1e-4·|x|: two orders of magnitude of margin, while the bugs
// they exist for (a sum instead of an average, a BN statistic not synced, a
// micro-step reduced twice, a bucket skipped) change parameters by 1e-2 or
// more. Adam is insensitive to a constant gradient scale, so the averaged
// gradients of the first step are compared too. A float64 run is held to
// 1e-10 relative.
#include <cmath>
#include <cstring>

#include "backend/ops.h"
#include "dist/grad_reducer.h"
#include "harness.h"
#include "kernels/random.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optimizer.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;

namespace {

hpc::dist::Communicator& comm() { return mpitest::ctx().host_comm(); }

const Shape SAMPLE{1, 8, 8};
constexpr int CLASSES = 10;
const char* MLP = "flatten linear(32) relu linear(32) relu linear(10)";
const char* CNN = "conv(4,3,pad=1) bn relu maxpool(2) conv(8,3,pad=1) bn relu flatten linear(10)";

struct Recipe {
  std::string spec;
  hpc::OptimConfig optim;
  int64_t b = 4;      // samples per rank per micro-step
  int64_t accum = 1;  // micro-steps per optimizer step
  int steps = 5;
  DType dtype = DType::F32;
  bool sync_bn = true;
};

struct Buckets {
  double bytes = 25.0 * 1048576;
  bool layer_cuts = true;  // cut at parameter offsets (as the trainer does), or anywhere
  bool overlap = true;
};

struct Result {
  Tensor params, first_grads;
  std::vector<Tensor> buffers;
};

// Adam divides each coordinate by √v + eps, so a coordinate whose gradient nearly cancels over
// the batch (observed: 8.9e-8, a sum of terms of 1e-2) takes float32 rounding noise (δg ~ 1e-9,
// a 0.5% change of that gradient) into its step: lr·δg/(|g| + eps) per step. With the default
// eps = 1e-8 that is 1e-2 of a step: noise about Adam, not about communication. The float32 runs
// use eps = 1e-5, bounding it by lr·1e-4 = 1e-6 per step, 5e-6 over 5 steps, under the 1e-5
// tolerance; the float64 run keeps the default eps (its δg is 1e-18).
hpc::OptimConfig adam(double lr, double eps = 1e-5) {
  hpc::OptimConfig c;
  c.name = hpc::OptimizerKind::Adam;
  c.lr = lr;
  c.eps = eps;
  return c;
}

hpc::OptimConfig sgd_momentum(double lr) {
  hpc::OptimConfig c;
  c.name = hpc::OptimizerKind::Sgd;
  c.lr = lr;
  c.momentum = 0.9;
  return c;
}

// The id of sample i of rank r's part of micro-step m of step s.
int64_t sample_id(int64_t s, int world, int r, int64_t m, int64_t i, const Recipe& st) {
  return ((s * world + r) * st.accum + m) * st.b + i;
}

template <typename T>
void write_sample(int64_t id, T* x, int32_t* y) {
  for (int64_t j = 0; j < SAMPLE.count(); ++j)
    x[j] = static_cast<T>(
        2 * hpc::kernels::random_uniform(2024, static_cast<uint64_t>(id), static_cast<uint64_t>(j)) - 1);
  *y = static_cast<int32_t>((id * 7 + 3) % CLASSES);
}

Tensor copy_of(const Tensor& t) {
  Tensor c(t.shape(), t.dtype());
  hpc::backend::copy(t, c);
  return c;
}

// reference = true: one process, all W·b samples of each micro-step. Otherwise this rank's b, reduced.
Result train(const Recipe& st, bool reference, const Buckets& bk = Buckets()) {
  const int world = comm().size(), rank = comm().rank();
  hpc::nn::Model model(st.spec, SAMPLE, st.dtype, 7);
  auto loss = hpc::nn::make_cross_entropy(0);
  auto opt = hpc::optim::Optimizer::create(st.optim, model.params(),
                                           hpc::optim::decay_ranges_of(model.param_info()));
  std::unique_ptr<hpc::dist::GradReducer> red;
  if (!reference) {
    std::vector<int64_t> cuts;
    if (bk.layer_cuts)
      for (const auto& p : model.param_info()) cuts.push_back(p.offset);
    red = std::make_unique<hpc::dist::GradReducer>(comm(), model.grads(), bk.bytes, cuts, bk.overlap);
  }
  const int64_t rows = reference ? world * st.b : st.b;
  Tensor x(SAMPLE.with_batch(rows), st.dtype), y(Shape{rows}, DType::I32);
  Tensor dlogits(model.output_shape().with_batch(rows), st.dtype);
  Result res;
  for (int64_t s = 0; s < st.steps; ++s) {
    model.zero_grads();
    for (int64_t m = 0; m < st.accum; ++m) {
      int64_t row = 0;
      for (int r = 0; r < world; ++r) {
        if (!reference && r != rank) continue;
        for (int64_t i = 0; i < st.b; ++i, ++row) {
          const int64_t id = sample_id(s, world, r, m, i, st);
          if (st.dtype == DType::F32)
            write_sample(id, x.data<float>() + row * SAMPLE.count(), y.data<int32_t>() + row);
          else
            write_sample(id, x.data<double>() + row * SAMPLE.count(), y.data<int32_t>() + row);
        }
      }
      hpc::nn::RunCtx rc;
      rc.training = true;
      rc.seed = 1;
      rc.step = static_cast<uint64_t>(s * st.accum + m);
      if (!reference && st.sync_bn) rc.sum_over_replicas = hpc::dist::replica_sum(comm());
      rc.rank = reference ? 0 : rank;
      const Tensor& logits = model.forward(x, rc);
      loss->forward_backward(logits, y, rows, static_cast<double>(rows * st.accum), dlogits);
      if (red && m + 1 == st.accum) {
        red->begin();
        model.backward(dlogits, rc, [&](int64_t frontier) { red->on_ready(frontier); });
      } else {
        model.backward(dlogits, rc);
      }
    }
    if (red) red->finish();
    if (s == 0) res.first_grads = copy_of(model.grads());
    opt->step(model.params(), model.grads(), st.optim.lr);
  }
  res.params = copy_of(model.params());
  for (auto& [name, t] : model.buffers()) res.buffers.push_back(copy_of(t));
  return res;
}

double value(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
}

// max over i of |a − b| / (atol + rtol·|b|): ≤ 1 passes.
double worst(const Tensor& a, const Tensor& b, double atol, double rtol) {
  double w = 0;
  for (int64_t i = 0; i < a.count(); ++i)
    w = std::max(w, std::fabs(value(a, i) - value(b, i)) / (atol + rtol * std::fabs(value(b, i))));
  return w;
}

// Every rank holds bitwise rank 0's parameters (they started equal and applied equal updates).
void expect_same_on_every_rank(const Tensor& params) {
  Tensor root = copy_of(params);
  comm().broadcast(root, 0);
  int32_t differ = std::memcmp(root.raw(), params.raw(), params.num_bytes()) != 0;
  comm().allreduce(Tensor::borrow(&differ, Shape{1}, DType::I32), hpc::dist::ReduceOp::Max);
  EXPECT_EQ(differ, 0) << "ranks hold different parameters";
}

void expect_equivalent(const Recipe& st) {
  Result dist = train(st, false);
  expect_same_on_every_rank(dist.params);
  if (comm().rank() != 0) return;
  Result ref = train(st, true);
  const bool f32 = st.dtype == DType::F32;
  const double atol = f32 ? 1e-5 : 1e-12, rtol = f32 ? 1e-4 : 1e-10;
  const double grads = worst(dist.first_grads, ref.first_grads, atol, rtol);
  const double params = worst(dist.params, ref.params, atol, rtol);
  double buffers = 0;
  for (size_t i = 0; i < ref.buffers.size(); ++i)
    buffers = std::max(buffers, worst(dist.buffers[i], ref.buffers[i], atol, rtol));
  std::printf(
      "  %d ranks vs 1: deviation / tolerance: step-1 gradients %.2g, parameters %.2g, BN statistics %.2g\n",
      comm().size(), grads, params, buffers);
  EXPECT_LE(grads, 1.0) << "averaged gradients of step 1";
  EXPECT_LE(params, 1.0) << "parameters after " << st.steps << " steps";
  EXPECT_LE(buffers, 1.0) << "BN running statistics";
  // The comparison can fail: the reference without averaging over ranks is far off.
  Tensor wrong = copy_of(dist.first_grads);
  hpc::backend::scale(wrong, comm().size());
  EXPECT_GT(worst(wrong, ref.first_grads, atol, rtol), 100.0);
}

}  // namespace

TEST(Equivalence, MlpWithAdam) { expect_equivalent({MLP, adam(1e-2)}); }

TEST(Equivalence, MlpWithAdamAndGradientAccumulation) {
  Recipe st{MLP, adam(1e-2)};
  st.accum = 3;
  expect_equivalent(st);
}

TEST(Equivalence, CnnWithSyncBatchNormAndSgdMomentum) { expect_equivalent({CNN, sgd_momentum(0.05)}); }

TEST(Equivalence, CnnWithSyncBatchNormAndGradientAccumulation) {
  Recipe st{CNN, sgd_momentum(0.05)};
  st.accum = 2;
  expect_equivalent(st);
}

TEST(Equivalence, Float64IsExactToRounding) {
  Recipe cnn{CNN, sgd_momentum(0.05)};
  cnn.dtype = DType::F64;
  expect_equivalent(cnn);
  Recipe mlp{MLP, adam(1e-2, 1e-8)};
  mlp.dtype = DType::F64;
  mlp.accum = 3;
  expect_equivalent(mlp);
}

TEST(Equivalence, UnsyncedBatchNormIsNotEquivalent) {
  // The control: without SyncBatchNorm each rank normalises by its own statistics,
  // which the check must see (otherwise it would not be testing SyncBN at all).
  Recipe st{CNN, sgd_momentum(0.05)};
  st.sync_bn = false;
  Result dist = train(st, false);
  if (comm().rank() != 0) return;
  st.sync_bn = true;
  Result ref = train(st, true);
  EXPECT_GT(worst(dist.params, ref.params, 1e-5, 1e-4), 10.0);
}

TEST(Buckets, EveryBucketingGivesBitwiseTheSameModel) {
  Recipe st{CNN, sgd_momentum(0.05)};
  st.accum = 2;
  st.steps = 3;
  const Result base = train(st, false, {1e12, true, true});  // one bucket for everything
  const std::vector<std::pair<const char*, Buckets>> variants = {
      {"one bucket per parameter tensor", {1, true, true}},
      {"buckets of >= 2 KiB at tensor boundaries", {2048, true, true}},
      {"tiny 256-byte buckets cut anywhere", {256, false, true}},
      {"one bucket per tensor, no overlap", {1, true, false}}};
  for (const auto& [name, bk] : variants) {
    Result r = train(st, false, bk);
    EXPECT_EQ(std::memcmp(r.params.raw(), base.params.raw(), base.params.num_bytes()), 0) << name;
  }
}

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
