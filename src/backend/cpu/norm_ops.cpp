// CPU batch normalisation (Ioffe & Szegedy 2015), in the pieces ops.def
// describes so that SyncBatchNorm can all-reduce between them.
//
// Sums are accumulated in double per (sample, channel) row. Normalisation
// and dx fold the per-channel constants first, so the per-element loops are
// y = (x − mean)·gain + beta and dx = k1·dy + k2·(x − mean) + k3. Centring
// before scaling keeps float32 exact-ish when |mean| ≫ std.
//
// The float32 row sums and per-element loops also have AVX-512 bodies
// (cpu/simd.h), written to give the default bodies' bits: the sums keep the
// same eight partial sums (one 8-lane register instead of two 4-lane ones).
//
// Channel-blocked float32 activations (core/tensor.h, between oneDNN
// convolutions) run their own loops over positions with one vector of
// channels each (below: "channel-blocked activations").
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/simd.h"
#include "backend/dispatch.h"
#include "backend/ops_impl.h"

namespace hpc::backend::cpu {

namespace {

int64_t rows_of(const Tensor& x, int64_t channels, int64_t spatial) {
  HPC_ASSERT(channels > 0 && spatial > 0 && x.count() % (channels * spatial) == 0, "batchnorm: shapes");
  return x.count() / (channels * spatial);
}

void check_sums(const Tensor& sums, int64_t count, const char* op) {
  HPC_ASSERT(sums.dtype() == DType::F64 && sums.count() == count, std::string(op) + ": sums must be F64");
}

// Σ u and Σ u·v over a row with u = a, v = b − shift, in double. A single
// accumulator is a serial chain the compiler may not reorder (strict IEEE),
// so it cannot vectorise, and GCC's SLP pass does not reliably find the
// multi-accumulator form either; GCC/Clang vector types say it directly:
// 2×4 double lanes, float → double conversion four at a time (6× faster).
using Double4 = double __attribute__((vector_size(32)));

template <typename T>
inline Double4 load4(const T* p) {
  return Double4{double(p[0]), double(p[1]), double(p[2]), double(p[3])};
}

template <typename T>
[[gnu::always_inline]] inline void row_sums_default(const T* a, const T* b, T shift, int64_t n, double& sum_u,
                                                    double& sum_uv) {
  Double4 su0 = {}, su1 = {}, suv0 = {}, suv1 = {};
  const double ds = double(shift);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const Double4 u0 = load4(a + k), u1 = load4(a + k + 4);
    su0 += u0;
    su1 += u1;
    suv0 += u0 * (load4(b + k) - ds);
    suv1 += u1 * (load4(b + k + 4) - ds);
  }
  double tail_u = 0, tail_uv = 0;
  for (; k < n; ++k) {
    tail_u += double(a[k]);
    tail_uv += double(a[k]) * (double(b[k]) - ds);
  }
  const Double4 su = su0 + su1, suv = suv0 + suv1;
  sum_u += (su[0] + su[1]) + (su[2] + su[3]) + tail_u;
  sum_uv += (suv[0] + suv[1]) + (suv[2] + suv[3]) + tail_uv;
}

// The same eight partial sums in one register: lane j of su is lane j of su0
// (j < 4) or of su1 (j ≥ 4) above, so every addition is the default's.
using Double8 = double __attribute__((vector_size(64)));
using Float8 = float __attribute__((vector_size(32)));

// Sixteen floats at p as two vectors of eight doubles. Converted as one
// vector: GCC widens that with two vcvtps2pd in AVX-512 code, but a vector of
// eight with two 4-wide conversions, an extract and an insert, which left the
// sums compute-bound at a third of the bandwidth. Exact: the same values.
[[gnu::always_inline]] inline void widen16(const float* p, Double8& lo, Double8& hi) {
  using Float16 = float __attribute__((vector_size(64)));
  using Double16 = double __attribute__((vector_size(128)));
  Float16 f;
  __builtin_memcpy(&f, p, sizeof f);
  const Double16 d = __builtin_convertvector(f, Double16);
  lo = __builtin_shufflevector(d, d, 0, 1, 2, 3, 4, 5, 6, 7);
  hi = __builtin_shufflevector(d, d, 8, 9, 10, 11, 12, 13, 14, 15);
}

HPC_AVX512 void row_sums_avx512(const float* a, const float* b, float shift, int64_t n, double& sum_u,
                                double& sum_uv) {
  Double8 su = {}, suv = {};
  const double ds = double(shift);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {  // as two steps of eight, converted together (widen16)
    Double8 u0, u1, v0, v1;
    widen16(a + k, u0, u1);
    widen16(b + k, v0, v1);
    su += u0;
    suv += u0 * (v0 - ds);
    su += u1;
    suv += u1 * (v1 - ds);
  }
  for (; k + 8 <= n; k += 8) {
    Float8 fa, fb;
    __builtin_memcpy(&fa, a + k, sizeof fa);
    __builtin_memcpy(&fb, b + k, sizeof fb);
    const Double8 u = __builtin_convertvector(fa, Double8);
    su += u;
    suv += u * (__builtin_convertvector(fb, Double8) - ds);
  }
  double tail_u = 0, tail_uv = 0;
  for (; k < n; ++k) {
    tail_u += double(a[k]);
    tail_uv += double(a[k]) * (double(b[k]) - ds);
  }
  const double u0 = su[0] + su[4], u1 = su[1] + su[5], u2 = su[2] + su[6], u3 = su[3] + su[7];
  const double v0 = suv[0] + suv[4], v1 = suv[1] + suv[5], v2 = suv[2] + suv[6], v3 = suv[3] + suv[7];
  sum_u += (u0 + u1) + (u2 + u3) + tail_u;
  sum_uv += (v0 + v1) + (v2 + v3) + tail_uv;
}

template <typename T>
void row_sums(const T* a, const T* b, T shift, int64_t n, double& sum_u, double& sum_uv) {
  if constexpr (std::is_same_v<T, float>)
    if (simd::avx512()) return row_sums_avx512(a, b, shift, n, sum_u, sum_uv);
  row_sums_default(a, b, shift, n, sum_u, sum_uv);
}

// The normalised value y = (x − mean)·gain + beta, gain = gamma·invstd: one
// expression for every normalise and relu-mask loop below, so that the mask
// of a fused relu (ops.def) is taken from the very value forward wrote.
template <typename T>
[[gnu::always_inline]] inline T bn_value(T x, T mu, T gain, T shift) {
  return (x - mu) * gain + shift;
}

template <typename T>
std::vector<T> gains_of(const Tensor& gamma, const Tensor& invstd, int64_t channels) {
  std::vector<T> g(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) g[size_t(c)] = gamma.data<T>()[c] * invstd.data<T>()[c];
  return g;
}

// out = y, or max(y, 0) with Relu, over one row.
template <bool Relu, typename T>
[[gnu::always_inline]] inline void normalize_row(const T* in, T* out, int64_t n, T mu, T gain, T shift) {
  for (int64_t k = 0; k < n; ++k) {
    const T v = bn_value(in[k], mu, gain, shift);
    out[k] = Relu ? kernels::relu_forward(v) : v;
  }
}
template <bool Relu>
HPC_AVX512 void normalize_row_avx512(const float* in, float* out, int64_t n, float mu, float gain,
                                     float shift) {
  normalize_row<Relu>(in, out, n, mu, gain, shift);
}

// out = dy where y > 0, else 0 (a fused relu's backward) over one row.
template <typename T>
[[gnu::always_inline]] inline void mask_row(const T* x, const T* dy, T* out, int64_t n, T mu, T gain,
                                            T shift) {
  for (int64_t k = 0; k < n; ++k) out[k] = kernels::relu_backward(bn_value(x[k], mu, gain, shift), dy[k]);
}
HPC_AVX512 void mask_row_avx512(const float* x, const float* dy, float* out, int64_t n, float mu, float gain,
                                float shift) {
  mask_row(x, dy, out, n, mu, gain, shift);
}

// Row loops with the AVX-512 bodies where the CPU has them (same bits).
template <typename T>
void normalize_any(const T* in, T* out, int64_t n, T mu, T gain, T shift, bool relu) {
  if constexpr (std::is_same_v<T, float>)
    if (simd::avx512())
      return relu ? normalize_row_avx512<true>(in, out, n, mu, gain, shift)
                  : normalize_row_avx512<false>(in, out, n, mu, gain, shift);
  relu ? normalize_row<true>(in, out, n, mu, gain, shift) : normalize_row<false>(in, out, n, mu, gain, shift);
}
template <typename T>
void mask_any(const T* x, const T* dy, T* out, int64_t n, T mu, T gain, T shift) {
  if constexpr (std::is_same_v<T, float>)
    if (simd::avx512()) return mask_row_avx512(x, dy, out, n, mu, gain, shift);
  mask_row(x, dy, out, n, mu, gain, shift);
}

// What a fused relu's mask needs per channel (or, blocked, per lane): mean,
// gain and beta. A null pointer to it: no relu.
template <typename T>
struct ReluMask {
  const T* mu;
  const T* gain;
  const T* shift;
};

// dx = k1·dy + k2·(x − mean) + k3 over one row.
template <typename T>
[[gnu::always_inline]] inline void dx_row(const T* xr, const T* gr, T* out, int64_t n, T k1, T k2, T k3,
                                          T mu) {
  for (int64_t k = 0; k < n; ++k) out[k] = k1 * gr[k] + k2 * (xr[k] - mu) + k3;
}
HPC_AVX512 void dx_row_avx512(const float* xr, const float* gr, float* out, int64_t n, float k1, float k2,
                              float k3, float mu) {
  dx_row(xr, gr, out, n, k1, k2, k3, mu);
}

// ---- channel-blocked activations (core/tensor.h): x is [N, C/B, S, B] ----
// Lane l of block cb is channel cb·B + l, so each position holds one vector
// of B channels, and every loop below runs over positions with per-lane
// constants. The sums keep one double accumulator per channel and sample
// (a different order of additions from the plain rows' eight partial sums:
// the two layouts agree to rounding, each repeats bit for bit). Float32
// only: no other dtype is ever blocked.
constexpr int LANES = 8;  // one Double8 / Float8 register (AVX-512) per 8 channels
using Float8v = float __attribute__((vector_size(32)));

// Eight floats from p as doubles (a macro, not a function: a 64-byte vector
// return value outside AVX-512 code would change the ABI).
#define HPC_WIDEN8(out, p)                        \
  do {                                            \
    Float8v f_;                                   \
    __builtin_memcpy(&f_, (p), sizeof f_);        \
    (out) = __builtin_convertvector(f_, Double8); \
  } while (0)

// A fused relu's mask constants for one block's lanes (ReluMask at the block's
// first channel), copied into locals so that the compiler keeps them in
// registers: the output pointer cannot alias them.
template <int B>
struct LaneMask {
  float mu[B], gain[B], shift[B];
  explicit LaneMask(const ReluMask<float>* r, int64_t c) {
    for (int l = 0; l < B; ++l) {
      mu[l] = r ? r->mu[c + l] : 0.0f;
      gain[l] = r ? r->gain[c + l] : 0.0f;
      shift[l] = r ? r->shift[c + l] : 0.0f;
    }
  }
  // dy where the normalised x is > 0, else 0.
  [[gnu::always_inline]] float masked(float x, float dy, int l) const {
    return kernels::relu_backward(bn_value(x, mu[l], gain[l], shift[l]), dy);
  }
};

// A block's B floats at p as B / LANES vectors of eight doubles (a block of
// sixteen through widen16).
template <int B>
[[gnu::always_inline]] inline void widen_block(const float* p, Double8 (&out)[B / LANES]) {
  if constexpr (B == 16) {
    widen16(p, out[0], out[1]);
  } else {
    for (int v = 0; v < B / LANES; ++v) HPC_WIDEN8(out[v], p + v * LANES);
  }
}

// sum_u[l] += Σ_s u[s, l] and sum_uv[l] += Σ_s u[s, l]·(b[s, l] − shift[l]) over one block of
// one sample, u = a, or with Relu a masked by the normalised b (a = dy, b = x).
template <int B, bool Relu>
[[gnu::always_inline]] inline void block_sums(const float* a, const float* b, const float* shift,
                                              int64_t spatial, double* sum_u, double* sum_uv,
                                              const LaneMask<B>& m) {
  constexpr int V = B / LANES;
  Double8 su[V] = {}, suv[V] = {}, sh[V];
  for (int v = 0; v < V; ++v) HPC_WIDEN8(sh[v], shift + v * LANES);
  for (int64_t s = 0; s < spatial; ++s) {
    const float* as = a + s * B;
    float masked[B];
    if constexpr (Relu) {
      for (int l = 0; l < B; ++l) masked[l] = m.masked(b[s * B + l], as[l], l);
      as = masked;
    }
    Double8 u[V], w[V];
    widen_block<B>(as, u);
    widen_block<B>(b + s * B, w);
    for (int v = 0; v < V; ++v) {
      su[v] += u[v];
      suv[v] += u[v] * (w[v] - sh[v]);
    }
  }
  for (int v = 0; v < V; ++v)
    for (int l = 0; l < LANES; ++l) {
      sum_u[v * LANES + l] += su[v][l];
      sum_uv[v * LANES + l] += suv[v][l];
    }
}

// out[s, l] = k1[l]·u[s, l] + k2[l]·(b[s, l] − mu[l]) + k3[l] over one block of one sample
// (dx: u = a = dy, or with Relu dy masked by the normalised b = x).
template <int B, bool Relu>
[[gnu::always_inline]] inline void block_affine(const float* a, const float* b, float* out, int64_t spatial,
                                                const float* k1p, const float* k2p, const float* k3p,
                                                const float* mup, const LaneMask<B>& m) {
  float k1[B], k2[B], k3[B], mu[B];
  for (int l = 0; l < B; ++l) k1[l] = k1p[l], k2[l] = k2p[l], k3[l] = k3p[l], mu[l] = mup[l];
  for (int64_t s = 0; s < spatial; ++s)
    for (int l = 0; l < B; ++l) {
      const float u = Relu ? m.masked(b[s * B + l], a[s * B + l], l) : a[s * B + l];
      out[s * B + l] = k1[l] * u + k2[l] * (b[s * B + l] - mu[l]) + k3[l];
    }
}

// normalize_row with per-lane constants, over one block of one sample.
template <int B, bool Relu>
[[gnu::always_inline]] inline void block_normalize(const float* x, float* out, int64_t spatial,
                                                   const float* mup, const float* gainp,
                                                   const float* shiftp) {
  float mu[B], gain[B], shift[B];
  for (int l = 0; l < B; ++l) mu[l] = mup[l], gain[l] = gainp[l], shift[l] = shiftp[l];
  for (int64_t s = 0; s < spatial; ++s)
    for (int l = 0; l < B; ++l) {
      const float v = bn_value(x[s * B + l], mu[l], gain[l], shift[l]);
      out[s * B + l] = Relu ? kernels::relu_forward(v) : v;
    }
}

template <int B, bool Relu>
HPC_AVX512 void block_sums_avx512(const float* a, const float* b, const float* shift, int64_t spatial,
                                  double* sum_u, double* sum_uv, const LaneMask<B>& m) {
  block_sums<B, Relu>(a, b, shift, spatial, sum_u, sum_uv, m);
}
template <int B, bool Relu>
HPC_AVX512 void block_affine_avx512(const float* a, const float* b, float* out, int64_t spatial,
                                    const float* k1, const float* k2, const float* k3, const float* mu,
                                    const LaneMask<B>& m) {
  block_affine<B, Relu>(a, b, out, spatial, k1, k2, k3, mu, m);
}
template <int B, bool Relu>
HPC_AVX512 void block_normalize_avx512(const float* x, float* out, int64_t spatial, const float* mu,
                                       const float* gain, const float* shift) {
  block_normalize<B, Relu>(x, out, spatial, mu, gain, shift);
}

// Calls f.operator()<B>() for the tensor's block (8 or 16).
template <typename F>
void with_block(const Tensor& x, const char* op, F&& f) {
  HPC_ASSERT(x.dtype() == DType::F32, std::string(op) + ": a blocked tensor must be float32");
  switch (x.channel_block()) {
    case 8:
      return f.template operator()<8>();
    case 16:
      return f.template operator()<16>();
    default:
      throw Error(EXIT_INTERNAL, std::string(op) + ": channel block " + std::to_string(x.channel_block()));
  }
}

// The per-block loops of the four ops, over (sample, block): `normalize`
// writes y (max(y, 0) with relu); `sums` adds into per-channel arrays;
// `affine` writes out = k1·a + k2·(b − mu) + k3 with per-channel k1, k2, k3,
// mu. With a ReluMask, `sums` and `affine` take a (= dy) masked by the
// normalised b (= x) > 0, recomputed on the way.
struct Blocks {
  int64_t samples, blocks, spatial;
  Blocks(const Tensor& x, int64_t channels, int64_t spatial_)
      : samples(rows_of(x, channels, spatial_)), blocks(channels / x.channel_block()), spatial(spatial_) {
    HPC_ASSERT(channels % x.channel_block() == 0, "batchnorm: channels not a multiple of the block");
  }
  // f(offset of the block's data, its first channel) for every (sample, block).
  template <int B, typename F>
  void each(F&& f) const {
    for (int64_t n = 0; n < samples; ++n)
      for (int64_t cb = 0; cb < blocks; ++cb) f((n * blocks + cb) * spatial * B, cb * B);
  }
  template <int B>
  void normalize(const float* x, float* out, const float* mu, const float* gain, const float* shift,
                 bool relu) const {
    const bool wide = simd::avx512();
    each<B>([&](int64_t at, int64_t c) {
      auto* f = relu ? (wide ? block_normalize_avx512<B, true> : block_normalize<B, true>)
                     : (wide ? block_normalize_avx512<B, false> : block_normalize<B, false>);
      f(x + at, out + at, spatial, mu + c, gain + c, shift + c);
    });
  }
  template <int B>
  void sums(const float* a, const float* b, const float* shift, double* sum_u, double* sum_uv,
            const ReluMask<float>* relu = nullptr) const {
    const bool wide = simd::avx512();
    each<B>([&](int64_t at, int64_t c) {
      const LaneMask<B> m(relu, c);
      auto* f = relu ? (wide ? block_sums_avx512<B, true> : block_sums<B, true>)
                     : (wide ? block_sums_avx512<B, false> : block_sums<B, false>);
      f(a + at, b + at, shift + c, spatial, sum_u + c, sum_uv + c, m);
    });
  }
  template <int B>
  void affine(const float* a, const float* b, float* out, const float* k1, const float* k2, const float* k3,
              const float* mu, const ReluMask<float>* relu = nullptr) const {
    const bool wide = simd::avx512();
    each<B>([&](int64_t at, int64_t c) {
      const LaneMask<B> m(relu, c);
      auto* f = relu ? (wide ? block_affine_avx512<B, true> : block_affine<B, true>)
                     : (wide ? block_affine_avx512<B, false> : block_affine<B, false>);
      f(a + at, b + at, out + at, spatial, k1 + c, k2 + c, k3 + c, mu + c, m);
    });
  }
};

}  // namespace

void batchnorm_stats(const Tensor& x, int64_t channels, int64_t spatial, const Tensor& stats) {
  const int64_t n = rows_of(x, channels, spatial);
  check_sums(stats, 2 * channels + 1, "batchnorm_stats");
  double* st = stats.data<double>();
  for (int64_t i = 0; i < 2 * channels; ++i) st[i] = 0;
  st[2 * channels] = double(n * spatial);
  if (x.channel_block()) {
    const std::vector<float> zero(size_t(channels), 0.0f);
    const Blocks blocks(x, channels, spatial);
    with_block(x, "batchnorm_stats", [&]<int B>() {
      blocks.sums<B>(x.data<float>(), x.data<float>(), zero.data(), st, st + channels);
    });
    return;
  }
  dispatch_float(x.dtype(), "batchnorm_stats", [&]<typename T>() {
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < channels; ++c) {
        const T* row = x.data<T>() + (s * channels + c) * spatial;
        double total = 0, total_sq = 0;
        row_sums(row, row, T(0), spatial, total, total_sq);
        st[c] += total;
        st[channels + c] += total_sq;
      }
  });
}

void batchnorm_finalize(const Tensor& stats, int64_t channels, double eps, double momentum,
                        const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                        const Tensor& running_var) {
  check_sums(stats, 2 * channels + 1, "batchnorm_finalize");
  const double* st = stats.data<double>();
  const double m = st[2 * channels];
  HPC_ASSERT(m > 0, "batchnorm_finalize: empty batch");
  // PyTorch's running variance is unbiased; one element per channel has none, keep the biased 0.
  const double unbias = m > 1 ? m / (m - 1) : 1.0;
  dispatch_float(mean.dtype(), "batchnorm_finalize", [&]<typename T>() {
    for (int64_t c = 0; c < channels; ++c) {
      const double mu = st[c] / m;
      const double var = std::max(st[channels + c] / m - mu * mu, 0.0);
      mean.data<T>()[c] = T(mu);
      invstd.data<T>()[c] = T(1.0 / std::sqrt(var + eps));
      if (running_mean.defined()) {
        T& rm = running_mean.data<T>()[c];
        T& rv = running_var.data<T>()[c];
        rm = T((1 - momentum) * double(rm) + momentum * mu);
        rv = T((1 - momentum) * double(rv) + momentum * var * unbias);
      }
    }
  });
}

void batchnorm_running_inverse(const Tensor& running_mean, const Tensor& running_var, double eps,
                               const Tensor& mean, const Tensor& invstd) {
  dispatch_float(mean.dtype(), "batchnorm_running_inverse", [&]<typename T>() {
    const int64_t channels = mean.count();
    for (int64_t c = 0; c < channels; ++c) {
      mean.data<T>()[c] = running_mean.data<T>()[c];
      invstd.data<T>()[c] = T(1.0 / std::sqrt(double(running_var.data<T>()[c]) + eps));
    }
  });
}

void batchnorm_normalize(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& gamma,
                         const Tensor& beta, bool relu, int64_t channels, int64_t spatial, const Tensor& y) {
  const int64_t n = rows_of(x, channels, spatial);
  HPC_ASSERT(y.count() == x.count() && y.channel_block() == x.channel_block(), "batchnorm_normalize: shapes");
  if (x.channel_block()) {
    const std::vector<float> gain = gains_of<float>(gamma, invstd, channels);
    const Blocks blocks(x, channels, spatial);
    with_block(x, "batchnorm_normalize", [&]<int B>() {
      blocks.normalize<B>(x.data<float>(), y.data<float>(), mean.data<float>(), gain.data(),
                          beta.data<float>(), relu);
    });
    return;
  }
  dispatch_float(y.dtype(), "batchnorm_normalize", [&]<typename T>() {
    const std::vector<T> gain = gains_of<T>(gamma, invstd, channels);
    for (int64_t c = 0; c < channels; ++c) {
      const T mu = mean.data<T>()[c], shift = beta.data<T>()[c];
      for (int64_t s = 0; s < n; ++s) {
        const int64_t at = (s * channels + c) * spatial;
        normalize_any(x.data<T>() + at, y.data<T>() + at, spatial, mu, gain[size_t(c)], shift, relu);
      }
    }
  });
}

void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                               const Tensor& gamma, const Tensor& beta, bool relu, int64_t channels,
                               int64_t spatial, const Tensor& grad_sums, const Tensor& dgamma,
                               const Tensor& dbeta) {
  const int64_t n = rows_of(x, channels, spatial);
  check_sums(grad_sums, 2 * channels, "batchnorm_backward_reduce");
  double* gs = grad_sums.data<double>();
  HPC_ASSERT(dy.channel_block() == x.channel_block(), "batchnorm_backward_reduce: layouts differ");
  if (x.channel_block()) {
    for (int64_t i = 0; i < 2 * channels; ++i) gs[i] = 0;
    const std::vector<float> gain = relu ? gains_of<float>(gamma, invstd, channels) : std::vector<float>();
    const ReluMask<float> mask{mean.data<float>(), gain.data(), relu ? beta.data<float>() : nullptr};
    const Blocks blocks(x, channels, spatial);
    with_block(x, "batchnorm_backward_reduce", [&]<int B>() {
      blocks.sums<B>(dy.data<float>(), x.data<float>(), mean.data<float>(), gs, gs + channels,
                     relu ? &mask : nullptr);
    });
    for (int64_t c = 0; c < channels; ++c) {  // Σdy·(x − mean) → Σdy·x̂
      gs[channels + c] *= double(invstd.data<float>()[c]);
      dgamma.data<float>()[c] += float(gs[channels + c]);
      dbeta.data<float>()[c] += float(gs[c]);
    }
    return;
  }
  dispatch_float(dy.dtype(), "batchnorm_backward_reduce", [&]<typename T>() {
    const std::vector<T> gain = relu ? gains_of<T>(gamma, invstd, channels) : std::vector<T>();
    std::vector<T> masked(relu ? size_t(spatial) : 0);
    for (int64_t c = 0; c < channels; ++c) {
      const T mu = mean.data<T>()[c];
      double sum_dy = 0, sum_dy_xc = 0;  // Σdy and Σdy·(x − mean)
      for (int64_t s = 0; s < n; ++s) {
        const T* xr = x.data<T>() + (s * channels + c) * spatial;
        const T* gr = dy.data<T>() + (s * channels + c) * spatial;
        if (relu) {
          mask_any(xr, gr, masked.data(), spatial, mu, gain[size_t(c)], beta.data<T>()[c]);
          gr = masked.data();
        }
        row_sums(gr, xr, mu, spatial, sum_dy, sum_dy_xc);
      }
      const double sum_dy_xhat = sum_dy_xc * double(invstd.data<T>()[c]);
      gs[c] = sum_dy;
      gs[channels + c] = sum_dy_xhat;
      dgamma.data<T>()[c] += T(sum_dy_xhat);
      dbeta.data<T>()[c] += T(sum_dy);
    }
  });
}

void batchnorm_backward_dx(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& beta, bool relu, const Tensor& stats,
                           const Tensor& grad_sums, int64_t channels, int64_t spatial, const Tensor& dx) {
  const int64_t n = rows_of(x, channels, spatial);
  const bool batch_stats = grad_sums.defined();
  if (batch_stats) {
    check_sums(stats, 2 * channels + 1, "batchnorm_backward_dx");
    check_sums(grad_sums, 2 * channels, "batchnorm_backward_dx");
  }
  HPC_ASSERT(dy.channel_block() == x.channel_block() && dx.channel_block() == x.channel_block(),
             "batchnorm_backward_dx: layouts differ");
  dispatch_float(dx.dtype(), "batchnorm_backward_dx", [&]<typename T>() {
    // dx = a·(dy − Σdy/M − x̂·Σdy·x̂/M), x̂ = (x − mean)·invstd, as k1·dy + k2·(x − mean) + k3.
    std::vector<T> ks(3 * static_cast<size_t>(channels), T(0));
    T *k1 = ks.data(), *k2 = k1 + channels, *k3 = k2 + channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double istd = double(invstd.data<T>()[c]);
      const double a = double(gamma.data<T>()[c]) * istd;
      k1[c] = T(a);
      if (batch_stats) {
        const double m = stats.data<double>()[2 * channels];
        const double g_mean = grad_sums.data<double>()[c] / m;
        const double g_xhat = grad_sums.data<double>()[channels + c] / m;
        k2[c] = T(-a * istd * g_xhat);
        k3[c] = T(-a * g_mean);
      }
    }
    const std::vector<T> gain = relu ? gains_of<T>(gamma, invstd, channels) : std::vector<T>();
    if constexpr (std::is_same_v<T, float>)
      if (x.channel_block()) {
        const ReluMask<float> mask{mean.data<float>(), gain.data(), relu ? beta.data<float>() : nullptr};
        const Blocks blocks(x, channels, spatial);
        with_block(x, "batchnorm_backward_dx", [&]<int B>() {
          blocks.affine<B>(dy.data<float>(), x.data<float>(), dx.data<float>(), k1, k2, k3,
                           mean.data<float>(), relu ? &mask : nullptr);
        });
        return;
      }
    HPC_ASSERT(!x.channel_block(), "batchnorm_backward_dx: a blocked tensor must be float32");
    std::vector<T> masked(relu ? size_t(spatial) : 0);
    for (int64_t c = 0; c < channels; ++c) {
      const T k1t = k1[c], k2t = k2[c], k3t = k3[c], mu = mean.data<T>()[c];
      for (int64_t s = 0; s < n; ++s) {
        const T* xr = x.data<T>() + (s * channels + c) * spatial;
        const T* gr = dy.data<T>() + (s * channels + c) * spatial;
        T* out = dx.data<T>() + (s * channels + c) * spatial;
        if (relu) {
          mask_any(xr, gr, masked.data(), spatial, mu, gain[size_t(c)], beta.data<T>()[c]);
          gr = masked.data();
        }
        if constexpr (std::is_same_v<T, float>)
          if (simd::avx512()) {
            dx_row_avx512(xr, gr, out, spatial, k1t, k2t, k3t, mu);
            continue;
          }
        dx_row(xr, gr, out, spatial, k1t, k2t, k3t, mu);
      }
    }
  });
}

}  // namespace hpc::backend::cpu
