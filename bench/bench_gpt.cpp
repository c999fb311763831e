// Benchmark: GPT training throughput (tokens/s) and model FLOPs utilisation.
//
// Trains a gpt preset (default gpt-small: 4 layers, 4 heads, width 256,
// context 128, byte vocabulary) on random tokens with AdamW, one BLAS
// thread per rank (OPENBLAS_NUM_THREADS overrides), on as many ranks as
// mpirun starts: every step is forward → token cross-entropy → backward →
// gradient AllReduce (average, MPI_Allreduce on the flat gradient buffer, as
// data parallel training does it) → AdamW. In the same run it measures this
// machine's sgemm peak with one thread (square 1024³ products), so the MFU
// below is against what the BLAS can actually do here:
//
//   MFU = tokens/s per rank × 3 × forward FLOPs per token / sgemm peak
//
// (3×: backward is two GEMMs per forward GEMM; attention counted over the
// full T×T like nanoGPT and PaLM do). Steps and the sgemm peak are timed in
// alternating rounds and reported as medians (MFU taken per round), so that
// another process's burst on a shared machine hits both sides of one ratio.
// bench/torch_gpt.py is the PyTorch peer with the same shapes, batch,
// optimizer and FLOP count; bench/gpt_vs_torch.py runs the two interleaved.
//
//   mpirun -np N build/bench/bench_gpt [steps=20] [batch=8] [preset=gpt-small] [recompute=0]
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// GFLOP/s of one-thread sgemm on 1024×1024 matrices: the ceiling for this rank.
class SgemmPeak {
 public:
  SgemmPeak() : a_(size_t(N) * N, 0.01f), b_(size_t(N) * N, 0.02f), c_(size_t(N) * N, 0.0f) { run(); }
  double measure_gflops(int reps) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) run();
    return 2.0 * N * N * double(N) * reps / seconds(t0) / 1e9;
  }

 private:
  static constexpr int N = 1024;
  void run() {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a_.data(), N, b_.data(), N, 0.0f,
                c_.data(), N);
  }
  std::vector<float> a_, b_, c_;
};

}  // namespace

int main(int argc, char** argv) {
  backend::cpu::fit_blas_core(argv);  // the BLAS core hpctrain would run (may re-execute, before MPI)
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  const int batch = argc > 2 ? std::atoi(argv[2]) : 8;
  nn::PresetOptions mc;
  mc.preset = argc > 3 ? argv[3] : "gpt-small";
  mc.recompute = argc > 4 && std::atoi(argv[4]) != 0;
  const char* env_threads = std::getenv("OPENBLAS_NUM_THREADS");
  if (!env_threads || std::atoi(env_threads) <= 0) openblas_set_num_threads(1);
  const int threads = openblas_get_num_threads();
  backend::cpu::onednn::set_threads(threads);  // oneDNN's OpenMP threads: as many as BLAS's

  const std::string spec = nn::preset_spec(mc, 256);
  long long vocab = 0, width = 0, context = 0;  // the preset's embed(vocab,width,context)
  std::sscanf(spec.c_str(), "embed(%lld,%lld,%lld)", &vocab, &width, &context);
  nn::Model model(spec, Shape{context}, DType::F32, 1);
  OptimConfig oc;
  oc.name = OptimizerKind::AdamW;
  oc.weight_decay = 0.1;
  auto opt = optim::Optimizer::create(oc, model.params(), optim::decay_ranges_of(model.param_info()));
  auto loss = nn::make_cross_entropy(0.0);
  Tensor x(Shape{batch, context}, DType::F32), y(Shape{batch, context}, DType::I32);
  const Tensor dl(model.output_shape().with_batch(batch), DType::F32);
  Rng rng(3, uint64_t(rank));
  for (int64_t i = 0; i < x.count(); ++i) {
    x.data<float>()[i] = float(rng.below(uint64_t(vocab)));
    y.data<int32_t>()[i] = int32_t(rng.below(uint64_t(vocab)));
  }

  nn::RunCtx rc;
  double loss_value = 0;
  auto step = [&] {
    model.zero_grads();
    const nn::LossStats s = loss->forward_backward(model.forward(x, rc), y, batch, batch, dl);
    loss_value = s.loss_sum / double(s.count);
    model.backward(dl, rc);
    if (world > 1) {
      MPI_Allreduce(MPI_IN_PLACE, model.grads().raw(), int(model.num_params()), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      backend::scale(model.grads(), 1.0 / world);
    }
    opt->step(model.params(), model.grads(), 3e-4);
  };
  const double flops_per_token = 3.0 * double(model.forward_flops()) / double(context);
  SgemmPeak sgemm;
  for (int i = 0; i < 3; ++i) step();
  const int rounds = std::min(steps, 5), per_round = std::max(1, steps / rounds);
  std::vector<double> step_s, peak_s, mfu_s;
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) step();
    MPI_Barrier(MPI_COMM_WORLD);
    const double s = seconds(t0) / per_round;
    const double peak = sgemm.measure_gflops(3);
    double peak_min = peak;  // the slowest rank's BLAS bounds the step
    MPI_Allreduce(&peak, &peak_min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    step_s.push_back(s);
    peak_s.push_back(peak_min);
    mfu_s.push_back(double(batch) * double(context) / s * flops_per_token / 1e9 / peak_min);
  }
  const double step_time = median(step_s), peak_min = median(peak_s), mfu = median(mfu_s);
  const double tokens_per_s = double(batch) * double(context) * world / step_time;
  const double achieved = tokens_per_s / world * flops_per_token / 1e9;
  const nn::ActivationBytes mem = model.activation_bytes(batch);
  if (rank == 0) {
    std::printf(
        "# %s%s: %lld parameters, context %lld, batch %d per rank, AdamW, %d rank(s) x %d BLAS thread(s)\n",
        mc.preset.c_str(), mc.recompute ? " (recompute)" : "", static_cast<long long>(model.num_params()),
        context, batch, world, threads);
    std::printf(
        "# activations %.1f MiB per rank (%.1f MiB without recompute); loss after %d steps %.4f; "
        "medians of %d rounds x %d steps\n",
        double(mem.kept) / 1048576.0, double(mem.without_recompute) / 1048576.0, rounds * per_round + 3,
        loss_value, rounds, per_round);
    std::printf("%-10s %10s %12s %14s %16s %8s\n", "ranks", "ms/step", "tokens/s", "GFLOP/s/rank",
                "sgemm peak/rank", "MFU");
    std::printf("%-10d %10.1f %12.0f %14.2f %16.2f %7.1f%%\n", world, 1e3 * step_time, tokens_per_s, achieved,
                peak_min, 100.0 * mfu);
    std::printf(
        "{\"impl\": \"hpctrain\", \"preset\": \"%s\", \"ranks\": %d, \"batch\": %d, \"tokens_per_s\": %.1f, "
        "\"mfu\": %.4f, \"sgemm_gflops\": %.2f, \"recompute\": %d}\n",
        mc.preset.c_str(), world, batch, tokens_per_s, mfu, peak_min, int(mc.recompute));
  }
  MPI_Finalize();
  return 0;
}
