// CPU activations, dropout and pooling: plain loops over contiguous memory
// that -O3 vectorises. The activation is chosen once per call (a switch
// outside the loop), never per element. GELU runs in the kernel table
// (isa/kernel_table.h): its exp is worth hand-written vector bodies.
#include <cstring>

#include "backend/cpu/isa/kernel_table.h"
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

}  // namespace

void activation_forward(kernels::ActivationKind act, const Tensor& x, const Tensor& y) {
  check_same_count(x, y, "activation_forward");
  dispatch_float(y.dtype(), "activation_forward", [&]<typename T>() {
    switch (act) {
      case kernels::ActivationKind::Relu:
        map_unary<T>(x, y, [](T v) { return kernels::relu_forward(v); });
        break;
      case kernels::ActivationKind::Gelu:
        kernel_table<T>().gelu_forward(x.data<T>(), y.data<T>(), y.count());
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
        kernel_table<T>().gelu_backward(x.data<T>(), dy.data<T>(), dx.data<T>(), dx.count());
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
