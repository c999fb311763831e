// CPU activations, dropout and pooling: plain loops over contiguous memory
// that -O3 vectorises. The activation is chosen once per call (a switch
// outside the loop), never per element. GELU in float32 goes through the
// vectorised exp of vec_math.h (the same formula as kernels/activation_math.h
// otherwise), 16 lanes at a time where the CPU has AVX-512 (simd.h: the same
// operations lane by lane as the 8-lane body, so the same bits).
#include <cstring>
#include <type_traits>

#include "backend/cpu/simd.h"
#include "backend/cpu/vec_math.h"
#include "backend/dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/activation_math.h"
#include "kernels/random.h"

namespace hpc::backend::cpu {

namespace {

void check_same_count(const Tensor& a, const Tensor& b, const char* op) {
  HPC_ASSERT(a.count() == b.count() && a.dtype() == b.dtype() && a.channel_block() == b.channel_block(),
             std::string(op) + ": " + a.shape().str() + " vs " + b.shape().str() + " (or dtypes, layouts)");
}

template <typename T, typename F>
void map_unary(const Tensor& x, const Tensor& y, F f) {
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  const int64_t n = x.count();
  for (int64_t i = 0; i < n; ++i) yp[i] = f(xp[i]);
}

template <typename T, typename F>
void map_binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  T* op = out.data<T>();
  const int64_t n = out.count();
  for (int64_t i = 0; i < n; ++i) op[i] = f(ap[i], bp[i]);
}

// The common maxpool(2): two input rows per output row, four candidates per
// output, the first maximum winning like the general loop.
template <typename T>
void max_pool_2x2(const T* in, int64_t width, int64_t ho, int64_t wo, T* out, int32_t* arg) {
  for (int64_t oh = 0; oh < ho; ++oh) {
    const int64_t top = 2 * oh * width;
    for (int64_t ow = 0; ow < wo; ++ow) {
      const int64_t i = top + 2 * ow;
      // Selects rather than branches: on real data which element wins is unpredictable.
      T m = in[i];
      int64_t best = i;
      for (const int64_t j : {i + 1, i + width, i + width + 1}) {
        const bool larger = in[j] > m;
        m = larger ? in[j] : m;
        best = larger ? j : best;
      }
      out[oh * wo + ow] = m;
      arg[oh * wo + ow] = static_cast<int32_t>(best);
    }
  }
}

#if HPC_CPU_VEC_EXP
// kernels::gelu_forward / gelu_backward, 8 floats at a time, with exp8.
void gelu_forward_f32(const float* x, float* y, int64_t n) {
  const __m256 k = _mm256_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm256_set1_ps(float(kernels::GELU_CUBIC));
  const __m256 one = _mm256_set1_ps(1.0f), minus_two = _mm256_set1_ps(-2.0f);
  map8(x, y, n, [&](__m256 v) {
    const __m256 u = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(c, v), v), v, v));
    return _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_mul_ps(minus_two, u))));
  });
}

void gelu_backward_f32(const float* x, const float* dy, float* dx, int64_t n) {
  const __m256 k2 = _mm256_set1_ps(float(-2 * kernels::GELU_SQRT_2_OVER_PI));
  const __m256 k = _mm256_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm256_set1_ps(float(kernels::GELU_CUBIC));
  const __m256 c3 = _mm256_set1_ps(float(3 * kernels::GELU_CUBIC));
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  map8(x, dy, dx, n, [&](__m256 v, __m256 g) {
    const __m256 v2 = _mm256_mul_ps(v, v);
    const __m256 s = _mm256_div_ps(
        one, _mm256_add_ps(one, exp8(_mm256_mul_ps(k2, _mm256_fmadd_ps(_mm256_mul_ps(c, v2), v, v)))));
    const __m256 du = _mm256_mul_ps(k, _mm256_fmadd_ps(c3, v2, one));
    const __m256 slope =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(two, v), s), _mm256_mul_ps(_mm256_sub_ps(one, s), du));
    return _mm256_mul_ps(g, _mm256_add_ps(s, slope));
  });
}

#if HPC_SIMD_AVX512
// The two bodies above in 16 lanes; the tail through masked loads and stores
// (zeros in the unused lanes, as load_partial pads).
HPC_AVX512 __m512 gelu16(__m512 v) {
  const __m512 k = _mm512_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm512_set1_ps(float(kernels::GELU_CUBIC));
  const __m512 u = _mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(c, v), v), v, v));
  return _mm512_div_ps(v,
                       _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
}

HPC_AVX512 __m512 gelu_grad16(__m512 v, __m512 g) {
  const __m512 k2 = _mm512_set1_ps(float(-2 * kernels::GELU_SQRT_2_OVER_PI));
  const __m512 k = _mm512_set1_ps(float(kernels::GELU_SQRT_2_OVER_PI)),
               c = _mm512_set1_ps(float(kernels::GELU_CUBIC));
  const __m512 c3 = _mm512_set1_ps(float(3 * kernels::GELU_CUBIC));
  const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  const __m512 v2 = _mm512_mul_ps(v, v);
  const __m512 s = _mm512_div_ps(
      one, _mm512_add_ps(one, exp16(_mm512_mul_ps(k2, _mm512_fmadd_ps(_mm512_mul_ps(c, v2), v, v)))));
  const __m512 du = _mm512_mul_ps(k, _mm512_fmadd_ps(c3, v2, one));
  const __m512 slope =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(two, v), s), _mm512_mul_ps(_mm512_sub_ps(one, s), du));
  return _mm512_mul_ps(g, _mm512_add_ps(s, slope));
}

HPC_AVX512 void gelu_forward_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i == n) return;
  const __mmask16 m = __mmask16((1u << (n - i)) - 1);
  _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
}

HPC_AVX512 void gelu_backward_avx512(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dx + i, gelu_grad16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(dy + i)));
  if (i == n) return;
  const __mmask16 m = __mmask16((1u << (n - i)) - 1);
  _mm512_mask_storeu_ps(dx + i, m,
                        gelu_grad16(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, dy + i)));
}
#endif
#endif

}  // namespace

void activation_forward(kernels::ActivationKind act, const Tensor& x, const Tensor& y) {
  check_same_count(x, y, "activation_forward");
  dispatch_float(y.dtype(), "activation_forward", [&]<typename T>() {
    switch (act) {
      case kernels::ActivationKind::Relu:
        map_unary<T>(x, y, [](T v) { return kernels::relu_forward(v); });
        break;
      case kernels::ActivationKind::Gelu:
#if HPC_CPU_VEC_EXP
        if constexpr (std::is_same_v<T, float>) {
#if HPC_SIMD_AVX512
          if (simd::avx512()) {
            gelu_forward_avx512(x.data<float>(), y.data<float>(), y.count());
            break;
          }
#endif
          gelu_forward_f32(x.data<float>(), y.data<float>(), y.count());
          break;
        }
#endif
        map_unary<T>(x, y, [](T v) { return kernels::gelu_forward(v); });
        break;
      case kernels::ActivationKind::Tanh:
        map_unary<T>(x, y, [](T v) { return kernels::tanh_forward(v); });
        break;
    }
  });
}

void activation_backward(kernels::ActivationKind act, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx) {
  check_same_count(dy, dx, "activation_backward");
  check_same_count(x, dx, "activation_backward");
  dispatch_float(dx.dtype(), "activation_backward", [&]<typename T>() {
    switch (act) {
      case kernels::ActivationKind::Relu:
        map_binary<T>(x, dy, dx, [](T v, T g) { return kernels::relu_backward(v, g); });
        break;
      case kernels::ActivationKind::Gelu:
#if HPC_CPU_VEC_EXP
        if constexpr (std::is_same_v<T, float>) {
#if HPC_SIMD_AVX512
          if (simd::avx512()) {
            gelu_backward_avx512(x.data<float>(), dy.data<float>(), dx.data<float>(), dx.count());
            break;
          }
#endif
          gelu_backward_f32(x.data<float>(), dy.data<float>(), dx.data<float>(), dx.count());
          break;
        }
#endif
        map_binary<T>(x, dy, dx, [](T v, T g) { return kernels::gelu_backward(v, g); });
        break;
      case kernels::ActivationKind::Tanh:
        map_binary<T>(y, dy, dx, [](T v, T g) { return kernels::tanh_backward(v, g); });
        break;
    }
  });
}

void elementwise_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_count(a, out, "elementwise_add");
  check_same_count(b, out, "elementwise_add");
  dispatch_float(out.dtype(), "elementwise_add",
                 [&]<typename T>() { map_binary<T>(a, b, out, [](T u, T v) { return u + v; }); });
}

// The same addition, then relu_forward: the bits of elementwise_add and a relu after it.
void add_relu(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_count(a, out, "add_relu");
  check_same_count(b, out, "add_relu");
  dispatch_float(out.dtype(), "add_relu", [&]<typename T>() {
    map_binary<T>(a, b, out, [](T u, T v) { return kernels::relu_forward(T(u + v)); });
  });
}

// ---- dropout ----------------------------------------------------------------

void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset,
                     const Tensor& y) {
  check_same_count(x, y, "dropout_forward");
  HPC_ASSERT(p >= 0 && p < 1, "dropout: p outside [0, 1)");
  dispatch_float(y.dtype(), "dropout_forward", [&]<typename T>() {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T keep_scale = T(1.0 / (1.0 - p));
    const int64_t n = y.count();
    for (int64_t i = 0; i < n; ++i) {
      // Multiplying by 0 or the factor 1/(1 − p), not branching: the branch would be a coin flip.
      const bool keep = kernels::random_uniform(seed, stream, offset + uint64_t(i)) >= p;
      yp[i] = xp[i] * (T(keep) * keep_scale);
    }
  });
}

void dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t stream, uint64_t offset,
                      const Tensor& dx) {
  dropout_forward(dy, p, seed, stream, offset, dx);  // the same mask and factor: the op is linear
}

// ---- pooling ----------------------------------------------------------------

void max_pool_forward(const Tensor& x, const kernels::PoolShape& g, const Tensor& y, const Tensor& argmax) {
  const int64_t ho = g.out_h, wo = g.out_w, plane = g.height * g.width;
  const int64_t planes = x.count() / plane;
  HPC_ASSERT(y.count() == planes * ho * wo && argmax.count() == y.count() && argmax.dtype() == DType::I32,
             "max_pool_forward: shapes");
  dispatch_float(y.dtype(), "max_pool_forward", [&]<typename T>() {
    for (int64_t p = 0; p < planes; ++p) {
      const T* in = x.data<T>() + p * plane;
      T* out = y.data<T>() + p * ho * wo;
      int32_t* arg = argmax.data<int32_t>() + p * ho * wo;
      if (g.kernel == 2 && g.stride == 2 && g.pad == 0) {
        max_pool_2x2(in, g.width, ho, wo, out, arg);
        continue;
      }
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          // The window clipped to the image: padding never wins.
          const int64_t top = oh * g.stride - g.pad, left = ow * g.stride - g.pad;
          const int64_t y0 = std::max<int64_t>(top, 0), y1 = std::min(top + g.kernel, g.height);
          const int64_t x0 = std::max<int64_t>(left, 0), x1 = std::min(left + g.kernel, g.width);
          int64_t best = y0 * g.width + x0;
          for (int64_t r = y0; r < y1; ++r)
            for (int64_t c = x0; c < x1; ++c)
              if (in[r * g.width + c] > in[best]) best = r * g.width + c;
          out[oh * wo + ow] = in[best];
          arg[oh * wo + ow] = static_cast<int32_t>(best);
        }
    }
  });
}

void max_pool_backward(const Tensor& dy, const Tensor& argmax, const kernels::PoolShape& g,
                       const Tensor& dx) {
  const int64_t out_plane = g.out_h * g.out_w, plane = g.height * g.width;
  const int64_t planes = dx.count() / plane;
  HPC_ASSERT(dy.count() == planes * out_plane && argmax.count() == dy.count(), "max_pool_backward: shapes");
  std::memset(dx.raw(), 0, dx.num_bytes());
  dispatch_float(dx.dtype(), "max_pool_backward", [&]<typename T>() {
    for (int64_t p = 0; p < planes; ++p) {
      const T* g_out = dy.data<T>() + p * out_plane;
      const int32_t* arg = argmax.data<int32_t>() + p * out_plane;
      T* g_in = dx.data<T>() + p * plane;
      for (int64_t o = 0; o < out_plane; ++o) g_in[arg[o]] += g_out[o];
    }
  });
}

void avg_pool_forward(const Tensor& x, const kernels::PoolShape& g, const Tensor& y) {
  const int64_t ho = g.out_h, wo = g.out_w, plane = g.height * g.width;
  const int64_t planes = x.count() / plane;
  HPC_ASSERT(y.count() == planes * ho * wo, "avg_pool_forward: shapes");
  dispatch_float(y.dtype(), "avg_pool_forward", [&]<typename T>() {
    const T inv_area = T(1.0 / double(g.kernel * g.kernel));
    for (int64_t p = 0; p < planes; ++p) {
      const T* in = x.data<T>() + p * plane;
      T* out = y.data<T>() + p * ho * wo;
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          T s = 0;
          for (int64_t ki = 0; ki < g.kernel; ++ki) {
            const T* row = in + (oh * g.stride + ki) * g.width + ow * g.stride;
            for (int64_t kj = 0; kj < g.kernel; ++kj) s += row[kj];
          }
          out[oh * wo + ow] = s * inv_area;
        }
    }
  });
}

void avg_pool_backward(const Tensor& dy, const kernels::PoolShape& g, const Tensor& dx) {
  const int64_t ho = g.out_h, wo = g.out_w, plane = g.height * g.width;
  const int64_t planes = dx.count() / plane;
  HPC_ASSERT(dy.count() == planes * ho * wo, "avg_pool_backward: shapes");
  std::memset(dx.raw(), 0, dx.num_bytes());
  dispatch_float(dx.dtype(), "avg_pool_backward", [&]<typename T>() {
    const T inv_area = T(1.0 / double(g.kernel * g.kernel));
    for (int64_t p = 0; p < planes; ++p) {
      const T* g_out = dy.data<T>() + p * ho * wo;
      T* g_in = dx.data<T>() + p * plane;
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          const T share = g_out[oh * wo + ow] * inv_area;
          for (int64_t ki = 0; ki < g.kernel; ++ki) {
            T* row = g_in + (oh * g.stride + ki) * g.width + ow * g.stride;
            for (int64_t kj = 0; kj < g.kernel; ++kj) row[kj] += share;
          }
        }
    }
  });
}

// A channel-blocked x ([N, C/B, S, B], core/tensor.h) gives the same sums in the same order.
void spatial_mean_forward(const Tensor& x, int64_t spatial, const Tensor& y) {
  HPC_ASSERT(x.count() == y.count() * spatial && y.channel_block() == 0, "spatial_mean_forward: shapes");
  const int64_t block = std::max<int64_t>(x.channel_block(), 1);
  dispatch_float(y.dtype(), "spatial_mean_forward", [&]<typename T>() {
    const double inv = 1.0 / double(spatial);
    const int64_t groups = y.count() / block;  // (sample, channel block) pairs
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t l = 0; l < block; ++l) {
        const T* in = x.data<T>() + g * spatial * block + l;
        double s = 0;
        for (int64_t k = 0; k < spatial; ++k) s += in[k * block];
        y.data<T>()[g * block + l] = T(s * inv);
      }
  });
}

void spatial_mean_backward(const Tensor& dy, int64_t spatial, const Tensor& dx) {
  HPC_ASSERT(dx.count() == dy.count() * spatial && dy.channel_block() == 0, "spatial_mean_backward: shapes");
  const int64_t block = std::max<int64_t>(dx.channel_block(), 1);
  dispatch_float(dx.dtype(), "spatial_mean_backward", [&]<typename T>() {
    const int64_t groups = dy.count() / block;
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t l = 0; l < block; ++l) {
        const T share = T(double(dy.data<T>()[g * block + l]) / double(spatial));
        T* out = dx.data<T>() + g * spatial * block + l;
        for (int64_t k = 0; k < spatial; ++k) out[k * block] = share;
      }
  });
}

}  // namespace hpc::backend::cpu
