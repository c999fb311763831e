// Benchmark: the MLP training step against OpenBLAS sgemm at the same shapes.
//
// Runs the mlp preset (784-512-512-10, batch 64, Adam) for a fixed number of
// steps on synthetic data and reports samples/s and achieved GFLOP/s (the
// FLOPs of the step's matrix products). In the same run it
// times exactly the GEMMs one step needs (forward x·Wᵀ, backward dW = dyᵀ·x
// and dx = dy·W for every Linear) back to back with cblas_sgemm: that is the
// step's ceiling on this machine, and the ratio is the figure of merit.
//
//   build/bench/bench_mlp [steps=300] [batch=64]
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/ops_core.h"
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

// Time of the GEMMs of one training step of a stack of Linear layers with these widths.
double sgemm_step_seconds(const std::vector<int>& widths, int batch, int reps, double* flops) {
  struct G {
    int m, n, k;
    bool ta, tb;
  };
  std::vector<G> gemms;
  *flops = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    int in = widths[i], out = widths[i + 1];
    gemms.push_back({batch, out, in, false, true});              // y = x·Wᵀ
    gemms.push_back({out, in, batch, true, false});              // dW = dyᵀ·x
    if (i > 0) gemms.push_back({batch, in, out, false, false});  // dx = dy·W (not for the first layer)
    *flops += 2.0 * batch * in * out * (i > 0 ? 3 : 2);
  }
  std::vector<std::vector<float>> a, b, c;
  for (const G& g : gemms) {
    a.emplace_back(size_t(g.m) * g.k, 0.01f);
    b.emplace_back(size_t(g.k) * g.n, 0.01f);
    c.emplace_back(size_t(g.m) * g.n, 0.0f);
  }
  auto run = [&] {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const G& g = gemms[i];
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n,
                  g.k, 1.0f, a[i].data(), g.ta ? g.m : g.k, b[i].data(), g.tb ? g.k : g.n, 0.0f, c[i].data(),
                  g.n);
    }
  };
  for (int r = 0; r < 20; ++r) run();
  auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) run();
  return seconds(t0) / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const int batch = argc > 2 ? std::atoi(argv[2]) : 64;
  const int threads = backend::cpu::configure_threads(1);
  const std::vector<int> widths = {784, 512, 512, 10};

  nn::Model model(nn::preset_spec("mlp", {512, 512}, 10), Shape{1, 28, 28}, DType::F32, 1);
  OptimConfig oc;
  oc.name = "adam";
  auto opt = optim::Optimizer::create(oc, model.params(), {});
  auto loss = nn::make_cross_entropy(0.0);
  Tensor x(Shape{batch, 1, 28, 28}, DType::F32), y(Shape{batch}, DType::I32),
      dl(Shape{batch, 10}, DType::F32);
  Rng rng(3);
  for (int64_t i = 0; i < x.count(); ++i) x.data<float>()[i] = float(rng.uniform());
  for (int i = 0; i < batch; ++i) y.data<int32_t>()[i] = int32_t(rng.below(10));

  nn::RunCtx rc;
  auto step = [&] {
    model.zero_grads();
    loss->forward_backward(model.forward(x, rc), y, batch, batch, dl);
    model.backward(dl, rc);
    optim::clip_grad_norm(model.grads(), 0.0);
    opt->step(model.params(), model.grads(), 1e-3);
  };
  for (int i = 0; i < 20; ++i) step();
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double step_s = seconds(t0) / steps;
  double gemm_flops = 0;
  const double gemm_s = sgemm_step_seconds(widths, batch, steps, &gemm_flops);
  // The step does exactly these GEMMs plus elementwise work, so both rows count the
  // same FLOPs (the first layer's input gradient is not computed, and not counted).
  const double step_flops = gemm_flops;

  std::printf("# mlp 784-512-512-10, batch %d, Adam, %d BLAS thread(s), %d steps\n", batch, threads, steps);
  std::printf("%-28s %12s %12s %10s\n", "what", "ms/step", "GFLOP/s", "samples/s");
  std::printf("%-28s %12.3f %12.2f %10.0f\n", "hpctrain training step", 1e3 * step_s,
              step_flops / step_s / 1e9, batch / step_s);
  std::printf("%-28s %12.3f %12.2f %10.0f\n", "sgemm, same shapes", 1e3 * gemm_s, gemm_flops / gemm_s / 1e9,
              batch / gemm_s);
  std::printf("step_vs_sgemm %.3f   (GFLOP/s of the step / GFLOP/s of sgemm at its shapes; target >= 0.75)\n",
              (step_flops / step_s) / (gemm_flops / gemm_s));
  return 0;
}
