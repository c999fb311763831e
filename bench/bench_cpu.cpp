// Benchmark: CPU compute against this machine's own limit, in one run.
//
//  1. the sgemm peak: cblas_sgemm at 512³, 1024³ (best of both) on the BLAS
//     core hpctrain runs (fit_blas_core, as at its start-up);
//  2. the mlp's GEMM shapes (784-512-512-10, batch 64: forward, dW, dx) in
//     OpenBLAS and in oneDNN's matmul, to decide which to use where;
//  3. every convolution of the cnn (MNIST) and resnet20 (CIFAR-10) presets,
//     forward + backward (data and weights; data not for a first layer), in
//     oneDNN and in the im2col + GEMM lowering (whose GEMMs are the gemm op:
//     oneDNN's matmul where m, n, k >= 64), GFLOP/s against the peak, and
//     which of oneDNN's kernels (direct or Winograd) ran each pass.
// The machine line (CPU model, flags, BLAS core, oneDNN ISA) comes first, so
// tables from different node types can be compared. One thread unless
// OPENBLAS_NUM_THREADS says otherwise; medians over rounds.
//
//   build/bench/bench_cpu [batch=64] [rounds=5]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/blas_core.h"
#include "backend/cpu/onednn.h"
#include "backend/cpu/threads.h"
#include "backend/ops.h"
#include "core/rng.h"
#include "nn/layers/conv_lowering.h"

#if HPCTRAIN_DNNL
#include <dnnl.hpp>
#endif

using namespace hpc;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Calls of fn for ~50 ms (after a warm-up call: plans, page faults).
int reps_for(const std::function<void()>& fn) {
  fn();
  const auto t0 = Clock::now();
  fn();
  const double once = std::max(1e-6, std::chrono::duration<double>(Clock::now() - t0).count());
  return std::max(1, static_cast<int>(0.05 / once));
}

double block(const std::function<void()>& fn, int reps) {
  const auto t = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t).count() / reps;
}

// Median seconds per call.
double time_call(const std::function<void()>& fn, int rounds) {
  const int reps = reps_for(fn);
  std::vector<double> per;
  per.reserve(static_cast<size_t>(rounds));
  for (int r = 0; r < rounds; ++r) per.push_back(block(fn, reps));
  return median(per);
}

// Two candidates timed in alternating blocks (a, b, a, b, …): on a shared
// machine a burst of other work then hits both sides of a round alike. The
// ratio is the median of the per-round ratios time(a) / time(b).
struct Pair {
  double a = 0, b = 0, ratio = 0;
};
Pair time_pair(const std::function<void()>& fa, const std::function<void()>& fb, int rounds) {
  const int ra = reps_for(fa), rb = reps_for(fb);
  std::vector<double> ta, tb, q;
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(block(fa, ra));
    tb.push_back(block(fb, rb));
    q.push_back(ta.back() / tb.back());
  }
  return {median(ta), median(tb), median(q)};
}

Tensor random(const Shape& s, uint64_t seed) {
  Tensor t(s, DType::F32);
  Rng rng(seed, 1);
  for (int64_t i = 0; i < t.count(); ++i) t.data<float>()[i] = static_cast<float>(rng.uniform() * 2 - 1);
  return t;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

struct Gemm {
  int m, n, k;
  bool ta, tb;
  Tensor a, b, c;
  Gemm(int m_, int n_, int k_, bool ta_, bool tb_)
      : m(m_),
        n(n_),
        k(k_),
        ta(ta_),
        tb(tb_),
        a(random(Shape{int64_t(m) * k}, 1)),
        b(random(Shape{int64_t(k) * n}, 2)),
        c(Shape{int64_t(m) * n}, DType::F32) {}
  double flop() const { return 2.0 * m * n * k; }
  void sgemm() const {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f,
                a.data<float>(), ta ? m : k, b.data<float>(), tb ? k : n, 0.f, c.data<float>(), n);
  }
};

// A limit, so the best round (the least disturbed by other work on a shared machine), not the median.
double sgemm_peak_gflops(int m, int n, int k, int rounds) {
  const Gemm g(m, n, k, false, false);
  const auto fn = [&] { g.sgemm(); };
  const int reps = reps_for(fn);
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) best = std::min(best, block(fn, reps));
  return g.flop() / best / 1e9;
}

#if HPCTRAIN_DNNL
// oneDNN's matmul on the same row-major operands (a transposed operand as strides).
class DnnlMatmul {
 public:
  explicit DnnlMatmul(const Gemm& g) : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {
    using dnnl::memory;
    const memory::dim m = g.m, n = g.n, k = g.k;
    const memory::desc a_md({m, k}, memory::data_type::f32, g.ta ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc b_md({k, n}, memory::data_type::f32, g.tb ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{n, 1});
    mm_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng_));
    a_ = memory(a_md, eng_, g.a.raw());
    b_ = memory(b_md, eng_, g.b.raw());
    c_ = memory(c_md, eng_, g.c.raw());
  }
  void run() {
    mm_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
  }

 private:
  dnnl::engine eng_;
  dnnl::stream stream_;
  dnnl::matmul mm_;
  dnnl::memory a_, b_, c_;
};
#endif

struct ConvLayer {
  const char* name;
  int64_t c, h, w, oc, k, stride, pad;
  bool first;  // no input gradient
};

}  // namespace

int main(int argc, char** argv) {
  backend::cpu::fit_blas_core(argv);
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const char* env_threads = std::getenv("OPENBLAS_NUM_THREADS");
  if (!env_threads || std::atoi(env_threads) <= 0) openblas_set_num_threads(1);
  backend::cpu::onednn::set_threads(openblas_get_num_threads());

  const backend::cpu::BlasCore& core = backend::cpu::blas_core();
  std::printf("machine: %s; CPU %s; %d thread(s)\n", cpu_model().c_str(), core.cpu.c_str(),
              openblas_get_num_threads());
  std::printf("BLAS core: %s\n", core.line().c_str());
  std::printf("oneDNN: %s\n\n", backend::cpu::onednn::describe().c_str());

  const double peak =
      std::max(sgemm_peak_gflops(512, 512, 512, rounds), sgemm_peak_gflops(1024, 1024, 1024, rounds));
  std::printf("sgemm peak (best round of 512^3 and 1024^3): %.1f GFLOP/s\n\n", peak);

  std::printf("mlp GEMM shapes (batch %lld)      OpenBLAS GFLOP/s   oneDNN matmul GFLOP/s   faster\n",
              static_cast<long long>(batch));
  struct G {
    const char* what;
    int m, n, k;
    bool ta, tb;
  };
  const int b = static_cast<int>(batch);
  const G gemms[] = {
      {"fwd  784->512  x.W^T", b, 512, 784, false, true}, {"dW   784->512  dy^T.x", 512, 784, b, true, false},
      {"fwd  512->512", b, 512, 512, false, true},        {"dW   512->512", 512, 512, b, true, false},
      {"dx   512->512  dy.W", b, 512, 512, false, false}, {"fwd  512->10", b, 10, 512, false, true},
      {"dx   512->10", b, 512, 10, false, false}};
  // gpt-small (width 256, 4·256 MLP, context 128) at batch 8: 1024 token rows.
  const G gpt[] = {{"gpt qkv   256->768", 1024, 768, 256, false, true},
                   {"gpt qkv dW", 768, 256, 1024, true, false},
                   {"gpt mlp   256->1024", 1024, 1024, 256, false, true},
                   {"gpt mlp   1024->256", 1024, 256, 1024, false, true},
                   {"gpt mlp dx 1024->256", 1024, 1024, 256, false, false},
                   {"gpt mlp dW 1024->256", 256, 1024, 1024, true, false}};
  double blas_total = 0, dnnl_total = 0;
  for (const G& spec : gemms) {
    const Gemm g(spec.m, spec.n, spec.k, spec.ta, spec.tb);
#if HPCTRAIN_DNNL
    DnnlMatmul mm(g);
    const Pair t = time_pair([&] { g.sgemm(); }, [&] { mm.run(); }, rounds);
    blas_total += t.a;
    dnnl_total += t.b;
    std::printf("  %-28s %8.1f           %8.1f                %s (x%.2f)\n", spec.what, g.flop() / t.a / 1e9,
                g.flop() / t.b / 1e9, t.ratio > 1 ? "oneDNN" : "OpenBLAS",
                t.ratio > 1 ? t.ratio : 1 / t.ratio);
#else
    const double t = time_call([&] { g.sgemm(); }, rounds);
    blas_total += t;
    std::printf("  %-28s %8.1f           (no oneDNN in this build)\n", spec.what, g.flop() / t / 1e9);
#endif
  }
  std::printf("  all of one step's GEMMs: OpenBLAS %.3f ms", blas_total * 1e3);
  if (dnnl_total > 0) std::printf(", oneDNN %.3f ms", dnnl_total * 1e3);
  std::printf("\n\n");
#if HPCTRAIN_DNNL
  std::printf("gpt-small GEMM shapes (batch 8)  OpenBLAS GFLOP/s   oneDNN matmul GFLOP/s   faster\n");
  for (const G& spec : gpt) {
    const Gemm g(spec.m, spec.n, spec.k, spec.ta, spec.tb);
    DnnlMatmul mm(g);
    const Pair t = time_pair([&] { g.sgemm(); }, [&] { mm.run(); }, rounds);
    std::printf("  %-28s %8.1f           %8.1f                %s (x%.2f)\n", spec.what, g.flop() / t.a / 1e9,
                g.flop() / t.b / 1e9, t.ratio > 1 ? "oneDNN" : "OpenBLAS",
                t.ratio > 1 ? t.ratio : 1 / t.ratio);
  }
  std::printf("(hpctrain's gemm uses oneDNN where m, n, k >= 64: %s)\n\n",
              backend::cpu::onednn::matmul_wins(64, 64, 64) ? "on" : "off (HPCTRAIN_CPU_GEMM=openblas)");
#endif

  const ConvLayer layers[] = {
      {"cnn conv1 (MNIST)", 1, 28, 28, 32, 3, 1, 1, true},
      {"cnn conv2", 32, 14, 14, 64, 3, 1, 1, false},
      {"resnet20 stem", 3, 32, 32, 16, 3, 1, 1, true},
      {"resnet20 16@32x32", 16, 32, 32, 16, 3, 1, 1, false},
      {"resnet20 16->32 s2", 16, 32, 32, 32, 3, 2, 1, false},
      {"resnet20 32@16x16", 32, 16, 16, 32, 3, 1, 1, false},
      {"resnet20 32->64 s2", 32, 16, 16, 64, 3, 2, 1, false},
      {"resnet20 64@8x8", 64, 8, 8, 64, 3, 1, 1, false},
  };
  std::printf(
      "conv fwd+bwd, batch %lld              GFLOP   oneDNN ms  GFLOP/s  %%peak  lowered ms  GFLOP/s  %%peak "
      " speed-up\n",
      static_cast<long long>(batch));
  for (const ConvLayer& l : layers) {
    const kernels::ConvShape g = kernels::ConvShape::make(1, l.c, l.h, l.w, l.k, l.stride, l.pad);
    const Tensor x = random(Shape{batch, l.c, l.h, l.w}, 3), w = random(Shape{l.oc, l.c, l.k, l.k}, 4);
    const Tensor dy = random(Shape{batch, l.oc, g.out_h, g.out_w}, 5);
    Tensor y(dy.shape(), DType::F32), dw(w.shape(), DType::F32), dx(x.shape(), DType::F32);
    backend::fill(dw, 0.0);
    const Tensor dx_or_none = l.first ? Tensor() : dx;
    const double fwd_flop =
        2.0 * double(l.oc) * double(g.col_rows()) * double(g.out_pixels()) * double(batch);
    const double flop = fwd_flop * (l.first ? 2 : 3);
    nn::ConvScratch scratch;
    auto lowered = [&] {
      nn::lowered_conv2d_forward(x, w, g, y, scratch);
      nn::lowered_conv2d_backward(x, w, dy, g, dw, dx_or_none, scratch);
    };
    auto library = [&] {
      backend::conv2d_forward(x, w, g, y);
      backend::conv2d_backward(x, w, dy, g, dw, dx_or_none);
    };
    double t_low = 0, t_dnnl = 0, speedup = 0;
    if (backend::conv2d_supported(x, w, y, g)) {
      const Pair t = time_pair(lowered, library, rounds);
      t_low = t.a, t_dnnl = t.b, speedup = t.ratio;
    } else {
      t_low = time_call(lowered, rounds);
    }
    const double low_gf = flop / t_low / 1e9;
    if (t_dnnl > 0) {
      const double d_gf = flop / t_dnnl / 1e9;
      std::printf("  %-30s %7.3f   %8.3f  %7.1f  %5.0f%%   %8.3f  %7.1f  %5.0f%%   %5.2fx\n", l.name,
                  flop / 1e9, t_dnnl * 1e3, d_gf, 100 * d_gf / peak, t_low * 1e3, low_gf, 100 * low_gf / peak,
                  speedup);
    } else {
      std::printf("  %-30s %7.3f   %8s  %7s  %6s   %8.3f  %7.1f  %5.0f%%\n", l.name, flop / 1e9, "-", "-",
                  "-", t_low * 1e3, low_gf, 100 * low_gf / peak);
    }
  }
  // GFLOP/s above count a direct convolution's FLOPs: a Winograd pass does fewer multiplications,
  // so its layer can read above the peak. Which kernel ran each pass:
  std::printf("oneDNN's kernels (GFLOP/s above are the direct FLOPs counted; Winograd does fewer):\n");
  for (const ConvLayer& l : layers) {
    const kernels::ConvShape g = kernels::ConvShape::make(1, l.c, l.h, l.w, l.k, l.stride, l.pad);
    const Tensor x(Shape{batch, l.c, l.h, l.w}, DType::F32), w(Shape{l.oc, l.c, l.k, l.k}, DType::F32),
        y(Shape{batch, l.oc, g.out_h, g.out_w}, DType::F32);
    if (backend::conv2d_supported(x, w, y, g))
      std::printf("  %-30s %s\n", l.name, backend::cpu::onednn::implementations(x, w, g, y).c_str());
  }
  return 0;
}
