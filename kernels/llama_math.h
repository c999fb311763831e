// The arithmetic of the Llama pieces (kernels/llama.cu), as functions the
// CPU backend and the CPU tests call too: RMSNorm rows, rotary position
// embeddings and the SwiGLU gate.
//
// RMSNorm (Zhang & Sennrich 2019, Llama's form): y = w·x·rstd with
// rstd = 1/√(mean(x²) + eps), eps inside the root and w multiplying (not
// 1 + w, as some other models' norms do). Row kernels run one warp per row
// as transformer_math.h's LayerNorm does: lane l of WARP handles columns l,
// l + WARP, … and the lanes' sums are combined by a butterfly shuffle; the
// sum of squares is double, as the CPU's.
//
// Rotary embeddings (Su et al. 2021) in the Hugging Face "rotate half" form:
// within a head of d dimensions, dimension i < d/2 pairs with i + d/2 and the
// pair turns by the angle pos·f_i, f_i = θ^(−2i/d) (rotary_inv_freq, with
// Llama 3's and linear position scaling). The interleaved form (Meta's
// original checkpoints, GGUF) pairs 2i with 2i + 1; a checkpoint in one form
// becomes the other by permuting the rows of q_proj and k_proj, which is why
// one kernel takes the pairing as a parameter. Backward is the same rotation
// by −angle (a rotation's transpose).
//
// SwiGLU (Shazeer 2020): out = silu(gate)·up with silu(g) = g·σ(g).
//
// T is the storage type, C = compute_t<T> the arithmetic type.
#pragma once

#include <cmath>
#include <cstdint>

#include "cast_math.h"
#include "hd.h"
#include "transformer_math.h"

namespace hpc::kernels {

// ---- rotary frequencies ----------------------------------------------------------

// Position scaling of the rotary frequencies (config.json's rope_scaling).
struct RopeScaling {
  enum class Kind { None, Linear, Llama3 } kind = Kind::None;
  double factor = 1;               // linear: positions / factor; llama3: low frequencies / factor
  double low_freq_factor = 1;      // llama3
  double high_freq_factor = 4;     // llama3
  double original_context = 8192;  // llama3: original_max_position_embeddings
};

// f_i for pair i of a head of d dimensions: θ^(−2i/d), scaled as Hugging Face's
// _compute_llama3_parameters / linear rope_scaling do (in double here).
inline double rotary_inv_freq(int64_t i, int64_t d, double theta, const RopeScaling& s) {
  const double f = 1.0 / std::pow(theta, double(2 * i) / double(d));
  switch (s.kind) {
    case RopeScaling::Kind::None:
      return f;
    case RopeScaling::Kind::Linear:
      return f / s.factor;
    case RopeScaling::Kind::Llama3: {
      const double pi = 3.14159265358979323846;
      const double wavelen = 2 * pi / f;
      const double low_wavelen = s.original_context / s.low_freq_factor;
      const double high_wavelen = s.original_context / s.high_freq_factor;
      if (wavelen < high_wavelen) return f;            // high frequencies: unchanged
      if (wavelen > low_wavelen) return f / s.factor;  // low frequencies: scaled
      const double smooth =
          (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      return (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return f;
}

// ---- rotary embeddings ----------------------------------------------------------

// The columns of the two elements of pair i in a head of d dimensions.
HD int64_t rotary_first(int64_t i, bool interleaved) { return interleaved ? 2 * i : i; }
HD int64_t rotary_second(int64_t i, int64_t d, bool interleaved) {
  return interleaved ? 2 * i + 1 : i + d / 2;
}

// Turns the pair (a, b) by the angle whose cosine and sine are c and s
// (by −angle when inverse): a' = a·c − b·s, b' = b·c + a·s. Written with
// explicit fma so that every compiler rounds it alike.
template <typename T>
HD void rotary_pair(T& a, T& b, compute_t<T> c, compute_t<T> s, bool inverse) {
  using C = compute_t<T>;
  using std::fma;
  const C x = C(a), y = C(b), sn = inverse ? -s : s;
  a = T(fma(x, c, -(y * sn)));
  b = T(fma(y, c, x * sn));
}

// Pair e of the q and k columns of qkv rows [rows, (heads + 2·kv_heads)·d]:
// e = (row·(heads + kv_heads) + head)·(d/2) + i, heads first, then the kv
// heads' keys; row r is at position r mod t_len, whose angles are row
// (r mod t_len) of the [·, d/2] cos and sin tables.
template <typename T>
HD void rotary_element(T* qkv, int64_t e, int64_t heads, int64_t kv_heads, int64_t d, int64_t t_len,
                       const T* cos_table, const T* sin_table, bool interleaved, bool inverse) {
  using C = compute_t<T>;
  const int64_t half = d / 2, rotated = heads + kv_heads;
  const int64_t i = e % half, head = (e / half) % rotated, row = e / (half * rotated);
  const int64_t pos = row % t_len;
  T* x = qkv + row * (heads + 2 * kv_heads) * d + head * d;  // q heads, then k heads right after them
  rotary_pair(x[rotary_first(i, interleaved)], x[rotary_second(i, d, interleaved)],
              C(cos_table[pos * half + i]), C(sin_table[pos * half + i]), inverse);
}

// ---- RMSNorm ----------------------------------------------------------------------

template <typename T>
HD double rms_lane_sum_sq(const T* x, int64_t width, int lane) {
  double s = 0;
  for (int64_t j = lane; j < width; j += WARP) s += double(x[j]) * double(x[j]);
  return s;
}

HD double rms_rstd(double sum_sq, int64_t width, double eps) {
  using std::sqrt;
  return 1.0 / sqrt(sum_sq / double(width) + eps);
}

// y = w·(x·rstd) for the lane's columns.
template <typename T>
HD void rms_lane_normalize(const T* x, const T* w, int64_t width, int lane, compute_t<T> rstd, T* y) {
  using C = compute_t<T>;
  for (int64_t j = lane; j < width; j += WARP) y[j] = T(C(w[j]) * (C(x[j]) * rstd));
}

// Σ w·dy·x̂ over the lane's columns, x̂ = x·rstd.
template <typename T>
HD double rms_lane_grad_sum(const T* x, const T* dy, const T* w, int64_t width, int lane, compute_t<T> rstd) {
  using C = compute_t<T>;
  double s = 0;
  for (int64_t j = lane; j < width; j += WARP) s += double(C(w[j]) * C(dy[j]) * (C(x[j]) * rstd));
  return s;
}

// dx = rstd·(w·dy − x̂·mean(w·dy·x̂)), written or added.
template <typename T>
HD void rms_lane_dx(const T* x, const T* dy, const T* w, int64_t width, int lane, compute_t<T> rstd,
                    compute_t<T> mean_gx, bool accumulate, T* dx) {
  using C = compute_t<T>;
  for (int64_t j = lane; j < width; j += WARP) {
    const C v = rstd * (C(w[j]) * C(dy[j]) - C(x[j]) * rstd * mean_gx);
    dx[j] = accumulate ? T(C(dx[j]) + v) : T(v);
  }
}

// Column j's Σ dy·x̂ over rows [begin, end), in row order (the weight gradient's partial).
template <typename T>
HD double rms_param_partial(const T* x, const T* dy, const T* rstd, int64_t width, int64_t j, int64_t begin,
                            int64_t end) {
  using C = compute_t<T>;
  double s = 0;
  for (int64_t r = begin; r < end; ++r)
    s += double(C(dy[r * width + j]) * (C(x[r * width + j]) * C(rstd[r])));
  return s;
}

// ---- SwiGLU ---------------------------------------------------------------------------

// gate_up rows are [gate (F) | up (F)] (the two projections side by side, one
// GEMM); out rows are F wide. Element e = row·F + j.
template <typename T>
HD void swiglu_forward_element(const T* gate_up, T* out, int64_t e, int64_t f) {
  using C = compute_t<T>;
  using std::exp;
  const int64_t row = e / f, j = e % f;
  const C g = C(gate_up[row * 2 * f + j]), u = C(gate_up[row * 2 * f + f + j]);
  const C sig = C(1) / (C(1) + exp(-g));
  out[e] = T(g * sig * u);
}

// d(gate) = dout·up·σ(g)·(1 + g·(1 − σ(g))), d(up) = dout·silu(g).
template <typename T>
HD void swiglu_backward_element(const T* gate_up, const T* dout, T* dgate_up, int64_t e, int64_t f) {
  using C = compute_t<T>;
  using std::exp;
  const int64_t row = e / f, j = e % f;
  const C g = C(gate_up[row * 2 * f + j]), u = C(gate_up[row * 2 * f + f + j]), d = C(dout[e]);
  const C sig = C(1) / (C(1) + exp(-g));
  dgate_up[row * 2 * f + j] = T(d * u * (sig * (C(1) + g * (C(1) - sig))));
  dgate_up[row * 2 * f + f + j] = T(d * (g * sig));
}

}  // namespace hpc::kernels
