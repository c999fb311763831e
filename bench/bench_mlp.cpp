// Benchmark: the MLP training step against OpenBLAS sgemm at the same shapes.
//
// Runs the mlp preset (784-512-512-10, batch 64, Adam) on synthetic data and
// reports samples/s and achieved GFLOP/s (the FLOPs of the step's matrix
// products). In the same run it times exactly the GEMMs one step needs
// (forward x·Wᵀ, backward dW = dyᵀ·x and dx = dy·W for every Linear) back to
// back with cblas_sgemm: that is the step's ceiling on this machine, and the
// ratio is the figure of merit.
//
// The two are timed in alternating rounds (step block, sgemm block, step
// block, …) and the figures are medians over the rounds, with the ratio
// taken per round: on a shared machine another process's burst then hits
// both sides of one ratio alike instead of only one of two long blocks.
// One BLAS thread (the "one thread per rank") unless
// OPENBLAS_NUM_THREADS says otherwise.
//
//   build/bench/bench_mlp [steps=300] [batch=64] [only=both|step|sgemm]
// (only=step / only=sgemm runs one side alone, for a profiler.)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/blas_core.h"
#include "backend/cpu/onednn.h"
#include "backend/ops.h"
#include "config/config.h"
#include "core/rng.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "optim/optimizer.h"

using namespace hpc;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Seconds per call of fn over reps calls.
double time_per_call(const std::function<void()>& fn, int reps) {
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) fn();
  return seconds(t0) / reps;
}

// The GEMMs of one training step of a stack of Linear layers with these widths.
class SgemmStep {
 public:
  SgemmStep(const std::vector<int>& widths, int batch) {
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      const int in = widths[i], out = widths[i + 1];
      gemms_.push_back({batch, out, in, false, true});              // y = x·Wᵀ
      gemms_.push_back({out, in, batch, true, false});              // dW = dyᵀ·x
      if (i > 0) gemms_.push_back({batch, in, out, false, false});  // dx = dy·W (not for the first layer)
      flops_ += 2.0 * batch * in * out * (i > 0 ? 3 : 2);
    }
    for (const G& g : gemms_) {
      a_.emplace_back(size_t(g.m) * g.k, 0.01f);
      b_.emplace_back(size_t(g.k) * g.n, 0.01f);
      c_.emplace_back(size_t(g.m) * g.n, 0.0f);
    }
  }
  void run() {
    for (size_t i = 0; i < gemms_.size(); ++i) {
      const G& g = gemms_[i];
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n,
                  g.k, 1.0f, a_[i].data(), g.ta ? g.m : g.k, b_[i].data(), g.tb ? g.k : g.n, 0.0f,
                  c_[i].data(), g.n);
    }
  }
  double flops() const { return flops_; }

 private:
  struct G {
    int m, n, k;
    bool ta, tb;
  };
  std::vector<G> gemms_;
  std::vector<std::vector<float>> a_, b_, c_;
  double flops_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  backend::cpu::fit_blas_core(argv);  // the BLAS core hpctrain would run (may re-execute, before MPI)
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;
  const int batch = argc > 2 ? std::max(1, std::atoi(argv[2])) : 64;
  const std::string only = argc > 3 ? argv[3] : "both";
  if (only != "both" && only != "step" && only != "sgemm") {
    std::fprintf(stderr, "bench_mlp: the third argument must be both, step or sgemm, not '%s'\n",
                 only.c_str());
    return 2;
  }
  const char* env_threads = std::getenv("OPENBLAS_NUM_THREADS");
  if (!env_threads || std::atoi(env_threads) <= 0) openblas_set_num_threads(1);
  const int threads = openblas_get_num_threads();
  backend::cpu::onednn::set_threads(threads);  // oneDNN's OpenMP threads: as many as BLAS's
  const std::vector<int> widths = {784, 512, 512, 10};

  nn::Model model(nn::preset_spec("mlp", {512, 512}, 10), Shape{1, 28, 28}, DType::F32, 1);
  OptimConfig oc;
  oc.name = OptimizerKind::Adam;
  auto opt = optim::Optimizer::create(oc, model.params(), {});
  auto loss = nn::make_cross_entropy(0.0);
  Tensor x(Shape{batch, 1, 28, 28}, DType::F32), y(Shape{batch}, DType::I32),
      dl(Shape{batch, 10}, DType::F32);
  Rng rng(3);
  for (int64_t i = 0; i < x.count(); ++i) x.data<float>()[i] = float(rng.uniform());
  for (int i = 0; i < batch; ++i) y.data<int32_t>()[i] = int32_t(rng.below(10));

  nn::RunCtx rc;
  const std::function<void()> step = [&] {
    model.zero_grads();
    loss->forward_backward(model.forward(x, rc), y, batch, batch, dl);
    model.backward(dl, rc);
    optim::clip_grad_norm(model.grads(), 0.0);
    opt->step(model.params(), model.grads(), 1e-3);
  };
  SgemmStep gemms(widths, batch);
  const std::function<void()> sgemm = [&] { gemms.run(); };

  // The step does exactly these GEMMs plus elementwise work, so both rows count the
  // same FLOPs (the first layer's input gradient is not computed, and not counted).
  const double flops = gemms.flops();
  const int rounds = std::min(steps, 10), per_round = std::max(1, steps / rounds);
  for (int i = 0; i < 20; ++i) {
    if (only != "sgemm") step();
    if (only != "step") sgemm();
  }
  std::vector<double> step_s, gemm_s, ratio;
  for (int r = 0; r < rounds; ++r) {
    if (only != "sgemm") step_s.push_back(time_per_call(step, per_round));
    if (only != "step") gemm_s.push_back(time_per_call(sgemm, per_round));
    if (only == "both") ratio.push_back(gemm_s.back() / step_s.back());
  }

  std::printf("# mlp 784-512-512-10, batch %d, Adam, %d BLAS thread(s), %d rounds x %d steps, medians\n",
              batch, threads, rounds, per_round);
  std::printf("%-28s %12s %12s %10s\n", "what", "ms/step", "GFLOP/s", "samples/s");
  for (const auto& [name, times] :
       {std::pair{"hpctrain training step", &step_s}, {"sgemm, same shapes", &gemm_s}})
    if (!times->empty()) {
      const double s = median(*times);
      std::printf("%-28s %12.3f %12.2f %10.0f\n", name, 1e3 * s, flops / s / 1e9, batch / s);
    }
  if (!ratio.empty())
    std::printf(
        "step_vs_sgemm %.3f   (GFLOP/s of the step / GFLOP/s of sgemm at its shapes, median of %d rounds; "
        "target "
        ">= 0.75)\n",
        median(ratio), rounds);
  return 0;
}
