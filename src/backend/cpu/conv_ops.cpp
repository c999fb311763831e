// CPU convolution: the pieces of the lowering (nn/layers/conv_lowering.h) on
// the CPU — im2col / col2im and the [a, b] ↔ [b, a] swap that turns a
// batched GEMM result into NCHW — and the library convolution ops: oneDNN
// (cpu/onednn.h) where the build has it, else conv2d_supported is false and
// the layer lowers.
//
// The common case, stride 1 with "same" padding (3×3 pad 1, 1×1 pad 0), has
// a fast path: a kernel tap (ki, kj) shifts the whole image by a constant
// number of elements, so its row of columns is ONE contiguous memcpy, after
// which the few elements that wrapped around a row edge are zeroed. That
// matters for small feature maps (8×8), where a per-row walk spends more
// time on loop overhead than on copying.
//
// Otherwise, for every (channel, ki, kj) row and output row oh, the input
// pixels read are one strided run of an input row, bounded by the padding;
// the run's bounds are computed once per row so the inner loop is branch-free.
#include <algorithm>
#include <cstring>

#include "backend/cpu/onednn.h"
#include "backend/dispatch.h"
#include "backend/ops_impl.h"

namespace hpc::backend::cpu {

namespace {

// Output columns [lo, hi) of an output row whose input column iw = ow·stride − shift
// lies inside [0, W), with shift = pad − kj.
struct ValidRun {
  int64_t lo, hi, shift;
};

ValidRun valid_run(const kernels::ConvShape& g, int64_t wo, int64_t kj) {
  const int64_t shift = g.pad - kj;  // iw = ow·stride − shift
  const int64_t lo = shift <= 0 ? 0 : (shift + g.stride - 1) / g.stride;
  const int64_t last = g.width - 1 + shift;  // ow·stride ≤ last; negative: no column is inside
  const int64_t hi = last < 0 ? 0 : std::min(wo, last / g.stride + 1);
  return {std::min(lo, wo), std::max(hi, std::min(lo, wo)), shift};
}

// Calls visit(input row or nullptr when it is padding, column segment, run, Wo) for every
// (row of cols, sample, output row) in cols order, so im2col and col2im share one walk.
template <typename T, typename Visit>
void walk_columns(const kernels::ConvShape& g, int64_t n, T* x, T* cols, Visit visit) {
  const int64_t ho = g.out_h, wo = g.out_w, pixels = ho * wo;
  const int64_t k = g.kernel, plane = g.height * g.width;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        T* col_row = cols + ((c * k + ki) * k + kj) * n * pixels;
        const ValidRun run = valid_run(g, wo, kj);
        for (int64_t s = 0; s < n; ++s) {
          T* image = x + (s * g.channels + c) * plane;
          for (int64_t oh = 0; oh < ho; ++oh) {
            const int64_t ih = oh * g.stride - g.pad + ki;
            T* col = col_row + s * pixels + oh * wo;
            const bool inside = ih >= 0 && ih < g.height;
            visit(inside ? image + ih * g.width : nullptr, col, run, wo);
          }
        }
      }
}

// The shifted-image view of one kernel tap in the stride-1, same-width case.
struct Tap {
  int64_t offset;          // input index − column index
  int64_t row_lo, row_hi;  // output rows whose input row exists
  int64_t col_lo, col_hi;  // output columns whose input column exists
  int64_t first, last;     // [first, last): column indices spanned by the valid rows
};

bool same_width(const kernels::ConvShape& g) { return g.stride == 1 && g.out_w == g.width; }

Tap tap(const kernels::ConvShape& g, int64_t ki, int64_t kj) {
  const int64_t dy = ki - g.pad, dx = kj - g.pad, w = g.width;
  Tap t{dy * w + dx,
        std::max<int64_t>(0, -dy),
        std::min(g.out_h, g.height - dy),
        std::max<int64_t>(0, -dx),
        std::min(w, w - dx),
        0,
        0};
  if (t.row_lo < t.row_hi) {
    t.first = t.row_lo * w + t.col_lo;
    t.last = (t.row_hi - 1) * w + t.col_hi;
  }
  return t;
}

// Zeroes the column entries of a tap whose input pixel is padding: whole
// rows above and below the image, and |kj − pad| entries at one end of each
// row in between. This runs once per (tap, sample): for small maps its loop
// overhead, not the memcpy, sets the speed of im2col.
template <typename T>
inline void zero_padding(const kernels::ConvShape& g, const Tap& t, T* col) {
  const int64_t w = g.width, pixels = g.out_pixels();
  const int64_t head = std::min(pixels, t.row_lo * w),
                tail = std::min(pixels, std::max(t.row_lo, t.row_hi) * w);
  for (int64_t i = 0; i < head; ++i) col[i] = T(0);
  for (int64_t i = tail; i < pixels; ++i) col[i] = T(0);
  // One strided pass per padded column (at most `pad` of them) rather than a loop per row.
  auto zero_column = [&](int64_t ow) {
    for (int64_t i = t.row_lo * w + ow; i < t.row_hi * w; i += w) col[i] = T(0);
  };
  for (int64_t ow = 0; ow < t.col_lo; ++ow) zero_column(ow);
  for (int64_t ow = t.col_hi; ow < w; ++ow) zero_column(ow);
}

template <typename T>
void im2col_same_width(const kernels::ConvShape& g, int64_t n, const T* x, T* cols) {
  const int64_t k = g.kernel, pixels = g.out_pixels(), plane = g.height * g.width;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        const Tap t = tap(g, ki, kj);
        for (int64_t s = 0; s < n; ++s) {
          const T* image = x + (s * g.channels + c) * plane;
          T* col = cols + ((c * k + ki) * k + kj) * n * pixels + s * pixels;
          for (int64_t i = t.first; i < t.last; ++i) col[i] = image[i + t.offset];
          zero_padding(g, t, col);  // also clears what the block memcpy wrapped in from the next row
        }
      }
}

// Zeroing the padding entries of cols first makes the wrapped-around part of
// the block add a no-op, which is why col2im may overwrite those entries.
template <typename T>
void col2im_same_width(const kernels::ConvShape& g, int64_t n, T* cols, T* dx) {
  const int64_t k = g.kernel, pixels = g.out_pixels(), plane = g.height * g.width;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        const Tap t = tap(g, ki, kj);
        for (int64_t s = 0; s < n; ++s) {
          T* image = dx + (s * g.channels + c) * plane;
          T* col = cols + ((c * k + ki) * k + kj) * n * pixels + s * pixels;
          zero_padding(g, t, col);
          for (int64_t i = t.first; i < t.last; ++i) image[i + t.offset] += col[i];
        }
      }
}

}  // namespace

void im2col(const Tensor& x, const kernels::ConvShape& g, const Tensor& cols) {
  HPC_ASSERT(x.count() % g.sample_in_count() == 0, "im2col: input is not whole samples");
  const int64_t n = x.count() / g.sample_in_count();
  HPC_ASSERT(cols.count() >= g.col_rows() * n * g.out_pixels() && cols.dtype() == x.dtype(),
             "im2col: column buffer too small");
  dispatch_float(x.dtype(), "im2col", [&]<typename T>() {
    if (same_width(g)) return im2col_same_width<T>(g, n, x.data<T>(), cols.data<T>());
    const int64_t stride = g.stride;
    walk_columns<T>(g, n, x.data<T>(), cols.data<T>(), [stride](T* in, T* col, ValidRun run, int64_t wo) {
      if (in == nullptr) {
        std::fill_n(col, wo, T(0));
        return;
      }
      std::fill_n(col, run.lo, T(0));
      if (stride == 1)
        std::copy_n(in + run.lo - run.shift, run.hi - run.lo, col + run.lo);
      else
        for (int64_t ow = run.lo; ow < run.hi; ++ow) col[ow] = in[ow * stride - run.shift];
      std::fill_n(col + run.hi, wo - run.hi, T(0));
    });
  });
}

void col2im(const Tensor& cols, const kernels::ConvShape& g, const Tensor& dx) {
  HPC_ASSERT(dx.count() % g.sample_in_count() == 0, "col2im: output is not whole samples");
  const int64_t n = dx.count() / g.sample_in_count();
  HPC_ASSERT(cols.count() >= g.col_rows() * n * g.out_pixels() && cols.dtype() == dx.dtype(),
             "col2im: column buffer too small");
  std::memset(dx.raw(), 0, dx.num_bytes());
  dispatch_float(dx.dtype(), "col2im", [&]<typename T>() {
    if (same_width(g)) return col2im_same_width<T>(g, n, cols.data<T>(), dx.data<T>());
    const int64_t stride = g.stride;
    walk_columns<T>(g, n, dx.data<T>(), cols.data<T>(), [stride](T* in, T* col, ValidRun run, int64_t) {
      if (in == nullptr) return;
      if (stride == 1)
        for (int64_t ow = run.lo; ow < run.hi; ++ow) in[ow - run.shift] += col[ow];
      else
        for (int64_t ow = run.lo; ow < run.hi; ++ow) in[ow * stride - run.shift] += col[ow];
    });
  });
}

void swap_leading_dims(const Tensor& src, const Tensor& dst, int64_t a, int64_t b, int64_t inner) {
  HPC_ASSERT(src.count() >= a * b * inner && dst.count() >= a * b * inner && src.dtype() == dst.dtype(),
             "swap_leading_dims: shapes");
  HPC_ASSERT(src.raw() != dst.raw(), "swap_leading_dims: in place");
  dispatch_float(dst.dtype(), "swap_leading_dims", [&]<typename T>() {
    const T* s = src.data<T>();
    T* d = dst.data<T>();
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) std::copy_n(s + (i * b + j) * inner, inner, d + (j * a + i) * inner);
  });
}

// ---- the library convolution ops: oneDNN where the build has it (cpu/onednn.h) ----

bool conv2d_supported(const Tensor& x, const Tensor& weight, const Tensor& y, const kernels::ConvShape&) {
  return onednn::takes(x, weight, y);
}

void conv2d_forward(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g, const Tensor& y) {
  onednn::convolve(x, weight, g, y);
}

void conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const kernels::ConvShape& g,
                     const Tensor& dweight, const Tensor& dx) {
  onednn::convolve_backward(x, weight, dy, g, dweight, dx);
}

}  // namespace hpc::backend::cpu
