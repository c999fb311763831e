// Pooling, one output (or input-gradient) element at a time: the bodies of
// the pooling kernels, shared with the CPU tests that run them over every
// index and compare with the CPU backend.
//
// Semantics are the CPU backend's: square windows, the FIRST maximum of a
// window wins (strict >, row-major), argmax is the index within the H×W
// plane. Max pooling may pad (`pad`: windows start pad pixels before the
// image, as PyTorch's MaxPool2d(padding=…)); positions outside the image
// take no part, i.e. they are −∞. Average pooling never pads.
//
// Backward is a gather: an input pixel sums, over the outputs whose window
// covers it and in increasing output order, exactly what the CPU's scatter
// adds to it in that same order — so float results match the CPU bit for
// bit (average pooling's backward up to the compiler fusing acc + dy·(1/k²)
// into one FMA) and no atomics are needed.
#pragma once

#include <cstdint>

#include "cast_math.h"
#include "hd.h"

namespace hpc::kernels {

// Square windows over `planes` planes of H×W. It is also
// the backend ops' and the layers' pooling geometry: a layer holds one
// sample's (planes = C, from make()), and an op takes the planes of the
// tensor it gets (N·C, with_planes) rather than the caller's.
struct PoolShape {
  int64_t planes = 0, height = 0, width = 0;  // planes = N·C
  int64_t kernel = 2, stride = 2;
  int64_t out_h = 0, out_w = 0;
  int64_t pad = 0;  // max pooling: window o spans [o·stride − pad, o·stride − pad + kernel)

  // The geometry with out_h, out_w computed from the input size, kernel, stride and padding.
  HD static PoolShape make(int64_t planes, int64_t height, int64_t width, int64_t kernel, int64_t stride,
                           int64_t pad = 0) {
    const int64_t out_h = (height + 2 * pad - kernel) / stride + 1,
                  out_w = (width + 2 * pad - kernel) / stride + 1;
    return {planes, height, width, kernel, stride, out_h, out_w, pad};
  }
  // The same geometry over `count` planes.
  HD PoolShape with_planes(int64_t count) const {
    PoolShape s = *this;
    s.planes = count;
    return s;
  }

  HD int64_t out_pixels() const { return out_h * out_w; }
  HD int64_t in_pixels() const { return height * width; }
};

// [first, last): the outputs along one axis whose window [o·stride, o·stride + k) holds pos.
struct CoverRange {
  int64_t first, last;
};
HD CoverRange covering_outputs(int64_t pos, int64_t kernel, int64_t stride, int64_t out) {
  const int64_t lo = pos - kernel + 1;  // o·stride ≥ pos − k + 1
  int64_t first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  int64_t last = pos / stride + 1;  // o·stride ≤ pos
  if (last > out) last = out;
  if (first > last) first = last;
  return {first, last};
}

// Output o (over planes × out_h × out_w): its maximum and where it is.
template <typename T>
HD void max_pool_element(const T* x, const PoolShape& g, int64_t o, T& y, int32_t& arg) {
  const int64_t plane = o / g.out_pixels(), pix = o % g.out_pixels();
  const int64_t oh = pix / g.out_w, ow = pix % g.out_w;
  const T* in = x + plane * g.in_pixels();
  // The window clipped to the image (without padding, the window itself).
  const int64_t top = oh * g.stride - g.pad, left = ow * g.stride - g.pad;
  const int64_t y0 = top < 0 ? 0 : top, x0 = left < 0 ? 0 : left;
  const int64_t y1 = top + g.kernel < g.height ? top + g.kernel : g.height;
  const int64_t x1 = left + g.kernel < g.width ? left + g.kernel : g.width;
  int64_t best = y0 * g.width + x0;
  for (int64_t r = y0; r < y1; ++r)
    for (int64_t c = x0; c < x1; ++c)
      if (in[r * g.width + c] > in[best]) best = r * g.width + c;
  y = in[best];
  arg = static_cast<int32_t>(best);
}

// dx at input element idx (over planes × H × W).
template <typename T>
HD T max_pool_backward_element(const T* dy, const int32_t* argmax, const PoolShape& g, int64_t idx) {
  using C = compute_t<T>;
  const int64_t plane = idx / g.in_pixels(), pix = idx % g.in_pixels();
  const int64_t ih = pix / g.width, iw = pix % g.width;
  // In padded coordinates the windows start at o·stride.
  const CoverRange rows = covering_outputs(ih + g.pad, g.kernel, g.stride, g.out_h);
  const CoverRange cols = covering_outputs(iw + g.pad, g.kernel, g.stride, g.out_w);
  const int64_t base = plane * g.out_pixels();
  C acc = C(0);
  for (int64_t oh = rows.first; oh < rows.last; ++oh)
    for (int64_t ow = cols.first; ow < cols.last; ++ow) {
      const int64_t o = base + oh * g.out_w + ow;
      if (argmax[o] == pix) acc += C(dy[o]);
    }
  return T(acc);
}

template <typename T>
HD T avg_pool_element(const T* x, const PoolShape& g, int64_t o) {
  using C = compute_t<T>;
  const int64_t plane = o / g.out_pixels(), pix = o % g.out_pixels();
  const int64_t oh = pix / g.out_w, ow = pix % g.out_w;
  const T* in = x + plane * g.in_pixels();
  const C inv_area = C(1.0 / double(g.kernel * g.kernel));
  C s = C(0);
  for (int64_t ki = 0; ki < g.kernel; ++ki) {
    const T* row = in + (oh * g.stride + ki) * g.width + ow * g.stride;
    for (int64_t kj = 0; kj < g.kernel; ++kj) s += C(row[kj]);
  }
  return T(s * inv_area);
}

template <typename T>
HD T avg_pool_backward_element(const T* dy, const PoolShape& g, int64_t idx) {
  using C = compute_t<T>;
  const int64_t plane = idx / g.in_pixels(), pix = idx % g.in_pixels();
  const int64_t ih = pix / g.width, iw = pix % g.width;
  const CoverRange rows = covering_outputs(ih, g.kernel, g.stride, g.out_h);
  const CoverRange cols = covering_outputs(iw, g.kernel, g.stride, g.out_w);
  const C inv_area = C(1.0 / double(g.kernel * g.kernel));
  const int64_t base = plane * g.out_pixels();
  C acc = C(0);
  for (int64_t oh = rows.first; oh < rows.last; ++oh)
    for (int64_t ow = cols.first; ow < cols.last; ++ow) acc += C(dy[base + oh * g.out_w + ow]) * inv_area;
  return T(acc);
}

// Global average pooling of one row of `spatial` elements, summed in double like the CPU.
template <typename T>
HD T spatial_mean_row(const T* x, int64_t spatial) {
  double s = 0;
  for (int64_t k = 0; k < spatial; ++k) s += double(x[k]);
  return T(s * (1.0 / double(spatial)));
}

}  // namespace hpc::kernels
