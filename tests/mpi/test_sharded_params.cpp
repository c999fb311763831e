// ShardedParams on real ranks (run with 2 and 3): ZeRO stage 3, and the
// staged gradients of stage 2 on a GPU (grads_only) — whose logic, apart from
// NCCL, runs here on host buffers — train bitwise what the replicated model
// with today's GradReducer trains.
//
// Each rank trains a small model the way the trainer does: forward,
// backward from a fixed output gradient (any gradient will do: the claim is
// that the same numbers go through the same additions), the reduction, the
// optimizer on the rank's shard. Models: a GPT with a tied head (a unit that
// reads another's parameters, and whose gradients two units write), and a
// CNN with SyncBatchNorm and a residual block. Variants: one unit per layer
// or bucketed, kept units or none, prefetch on and off, accumulation over two
// micro-steps (the whole-size accumulation buffer). An evaluation forward
// after every step must give the replicated logits too.
#include <bit>
#include <memory>

#include "backend/ops.h"
#include "core/mem_ledger.h"
#include "dist/grad_reducer.h"
#include "dist/sharded_params.h"
#include "dist/shards.h"
#include "harness.h"
#include "kernels/random.h"
#include "nn/model.h"
#include "optim/optimizer.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;

namespace {

hpc::dist::Communicator& comm() { return mpitest::ctx().host_comm(); }

struct Case {
  std::string spec;
  Shape sample;
  int64_t vocab = 0;  // token ids in [0, vocab) (0: images in [-1, 1))
};
const Case GPT{"embed(32,16,8) block(2) block(2) ln lm_head(32)", Shape{8}, 32};
const Case CNN{"conv(4,3,pad=1) bn relu res(conv(4,3,pad=1) bn relu conv(4,3,pad=1) bn) relu gap linear(10)",
               Shape{1, 8, 8}, 0};

enum class Mode { Replicated, Stage3, GradsOnly };

struct Setting {
  Mode mode = Mode::Stage3;
  double unit_mb = 0, keep_mb = 0;
  bool prefetch = true;
  int accum = 1;
};

struct Result {
  Tensor params;               // whole, after the last step
  std::vector<Tensor> logits;  // the evaluation forward after each step
};

Tensor copy_of(const Tensor& t) {
  Tensor c(t.shape(), t.dtype());
  hpc::backend::copy(t, c);
  return c;
}

void fill_input(const Case& c, const Tensor& x, uint64_t stream) {
  for (int64_t i = 0; i < x.count(); ++i) {
    const double u = hpc::kernels::random_uniform(11, stream, static_cast<uint64_t>(i));
    x.data<float>()[i] = c.vocab > 0
                             ? static_cast<float>(static_cast<int64_t>(u * static_cast<double>(c.vocab)))
                             : static_cast<float>(2 * u - 1);
  }
}

Result train(const Case& c, const Setting& s) {
  const int world = comm().size(), rank = comm().rank();
  hpc::nn::StoredRange stored;
  if (s.mode != Mode::Replicated) {
    stored.range = [world, rank](int64_t n) {
      const std::vector<int64_t> b = hpc::dist::shard_bounds(n, world);
      return std::pair{b[static_cast<size_t>(rank)], b[static_cast<size_t>(rank) + 1]};
    };
    stored.grads_only = s.mode == Mode::GradsOnly;
  }
  hpc::nn::Model model(c.spec, c.sample, DType::F32, 7, hpc::Device::CPU, stored);
  const std::vector<int64_t> bounds = hpc::dist::shard_bounds(model.num_params(), world);
  const int64_t lo = s.mode == Mode::Replicated ? 0 : bounds[static_cast<size_t>(rank)];
  const int64_t count =
      s.mode == Mode::Replicated ? model.num_params() : bounds[static_cast<size_t>(rank) + 1] - lo;
  const Tensor params = model.params().slice(lo - model.params_lo(), Shape{count});
  const Tensor grads = model.grads().slice(lo - model.grads_lo(), Shape{count});
  hpc::OptimConfig oc;
  oc.name = hpc::OptimizerKind::AdamW;
  oc.weight_decay = 0.1;
  auto opt = hpc::optim::Optimizer::create(
      oc, params,
      hpc::optim::decay_ranges_in(hpc::optim::decay_ranges_of(model.param_info()), lo, lo + count));

  std::unique_ptr<hpc::dist::GradReducer> reducer;
  std::unique_ptr<hpc::dist::ShardedParams> sharded;
  if (s.mode == Mode::Replicated) {
    std::vector<int64_t> cuts;
    for (const auto& p : model.param_info()) cuts.push_back(p.offset);
    reducer = std::make_unique<hpc::dist::GradReducer>(comm(), model.grads(), 1e-6 * 1048576, cuts, true);
  } else {
    hpc::dist::ShardedParams::Options o;
    o.plan.unit_elems = static_cast<int64_t>(s.unit_mb * 1048576 / 4);
    o.plan.keep_elems = static_cast<int64_t>(s.keep_mb * 1048576 / 4);
    o.plan.prefetch = s.prefetch;
    o.whole_grads = s.accum > 1;
    o.grads_only = s.mode == Mode::GradsOnly;
    o.plan.oversize_alone = o.grads_only;
    sharded = std::make_unique<hpc::dist::ShardedParams>(comm(), model, bounds, o);
  }

  const int64_t b = 2;
  Tensor x(c.sample.with_batch(b), DType::F32);
  Result res;
  for (int step = 0; step < 3; ++step) {
    hpc::backend::fill(grads, 0.0);
    if (s.mode == Mode::Replicated) model.zero_grads();
    for (int m = 0; m < s.accum; ++m) {
      const bool last = m + 1 == s.accum;
      const int64_t micro = int64_t{step} * s.accum + m;
      fill_input(c, x, static_cast<uint64_t>(micro * world + rank));
      hpc::nn::RunCtx rc;
      rc.training = true;
      rc.rank = rank;
      rc.step = static_cast<uint64_t>(micro);
      rc.sum_over_replicas = hpc::dist::replica_sum(comm());
      const Tensor& y = model.forward(x, rc);
      Tensor dy(y.shape(), DType::F32);
      fill_input(Case{"", Shape{}, 0}, dy,
                 static_cast<uint64_t>(1000 + micro * world + rank));  // floats
      if (reducer && last) {
        reducer->begin();
        model.backward(dy, rc, [&](int64_t f) { reducer->on_ready(f); });
      } else {
        if (sharded) sharded->begin_backward(last);
        model.backward(dy, rc);
      }
    }
    if (reducer) reducer->finish();
    if (sharded) sharded->finish();
    opt->step(params, grads, 1e-2);
    if (sharded && s.mode == Mode::GradsOnly) sharded->start_param_allgather();
    // Evaluation (stage 3: its own program, everything freed after).
    fill_input(c, x, static_cast<uint64_t>(5000) + static_cast<uint64_t>(step));
    hpc::nn::RunCtx eval;
    eval.training = false;
    res.logits.push_back(copy_of(model.forward(x, eval)));
  }
  if (sharded && s.mode == Mode::GradsOnly) sharded->finish_param_allgather();
  if (s.mode == Mode::Stage3) {
    res.params = Tensor(Shape{model.num_params()}, DType::F32);
    hpc::backend::copy(model.params(), res.params.slice(lo, Shape{count}));
    comm().allgather_shards(res.params, bounds);
  } else {
    res.params = copy_of(model.params());
  }
  return res;
}

int64_t differing(const Tensor& a, const Tensor& b) {
  if (a.count() != b.count()) return -1;
  int64_t n = 0;
  for (int64_t i = 0; i < a.count(); ++i)
    n += std::bit_cast<uint32_t>(a.data<float>()[i]) != std::bit_cast<uint32_t>(b.data<float>()[i]);
  return n;
}

void expect_bitwise(const Case& c, const Setting& s, const char* what) {
  Setting replicated = s;
  replicated.mode = Mode::Replicated;
  const Result want = train(c, replicated);
  const Result got = train(c, s);
  EXPECT_EQ(differing(got.params, want.params), 0) << what << ": parameters after 3 steps";
  for (size_t k = 0; k < want.logits.size(); ++k)
    EXPECT_EQ(differing(got.logits[k], want.logits[k]), 0)
        << what << ": evaluation logits after step " << k + 1;
}

TEST(ShardedParams, Stage3TrainsTheReplicatedBits) {
  for (const Case* c : {&GPT, &CNN}) {
    const bool gpt = c == &GPT;
    expect_bitwise(*c, {Mode::Stage3, 0, 0, true, 1}, gpt ? "gpt, unit per layer" : "cnn, unit per layer");
    expect_bitwise(*c, {Mode::Stage3, 0, 0, false, 1}, gpt ? "gpt, no prefetch" : "cnn, no prefetch");
    expect_bitwise(*c, {Mode::Stage3, 0.02, 1, true, 1},
                   gpt ? "gpt, bucketed and kept" : "cnn, bucketed, kept");
    expect_bitwise(*c, {Mode::Stage3, 0, 0, true, 2}, gpt ? "gpt, accumulation 2" : "cnn, accumulation 2");
    expect_bitwise(
        *c, {Mode::Stage3, 0.02, 0, false, 2},
        gpt ? "gpt, bucketed, accumulation 2, no prefetch" : "cnn, bucketed, accumulation 2, no prefetch");
  }
}

TEST(ShardedParams, GradsOnlyTrainsTheReplicatedBits) {
  for (const Case* c : {&GPT, &CNN}) {
    expect_bitwise(*c, {Mode::GradsOnly, 0, 0, true, 1}, "stage 2 staged gradients");
    expect_bitwise(*c, {Mode::GradsOnly, 0.002, 0, true, 2}, "stage 2 staged gradients, accumulation 2");
  }
}

// The ledger sees the shard and the fixed buffers, and nothing else of the model's state.
TEST(ShardedParams, TheLedgerCountsTheShardAndTheBuffers) {
  const int world = comm().size(), rank = comm().rank();
  const size_t params0 = hpc::mem_use_stats(hpc::MemUse::Params).in_use;
  const size_t gather0 = hpc::mem_use_stats(hpc::MemUse::GatherBuffers).in_use;
  hpc::nn::StoredRange stored;
  stored.range = [world, rank](int64_t n) {
    const std::vector<int64_t> b = hpc::dist::shard_bounds(n, world);
    return std::pair{b[static_cast<size_t>(rank)], b[static_cast<size_t>(rank) + 1]};
  };
  hpc::nn::Model model(GPT.spec, GPT.sample, DType::F32, 7, hpc::Device::CPU, stored);
  hpc::dist::ShardedParams sp(comm(), model, hpc::dist::shard_bounds(model.num_params(), world), {});
  EXPECT_EQ(hpc::mem_use_stats(hpc::MemUse::Params).in_use - params0, model.params().num_bytes());
  EXPECT_EQ(hpc::mem_use_stats(hpc::MemUse::GatherBuffers).in_use - gather0,
            static_cast<size_t>(sp.gather_buffer_bytes()));
}

}  // namespace

int main(int argc, char** argv) { return mpitest::run_all(argc, argv, 60); }
