// Convolution lowering, one output element at a time: the bodies of the
// im2col / col2im / swap kernels, shared with the CPU tests that run them
// over every index and compare with the CPU backend.
//
// Layouts are those of backend/ops.def: x is NCHW, cols is [C·k·k, n·Ho·Wo]
// with row (c, ki, kj) and column (sample, oh, ow). col2im is written as a
// GATHER (each input pixel sums the columns that read it) rather than the
// CPU's scatter: no atomics, deterministic, and since a pixel adds its
// contributions in (ki, kj) order — the CPU's order — float results match
// the CPU bit for bit.
#pragma once

#include <cstdint>

#include "cast_math.h"
#include "hd.h"

namespace hpc::kernels {

// Plain geometry a kernel can take by value: a chunk of n samples of
// C×H×W each and a square kernel. It is also the backend ops' and the
// layers' convolution geometry: they hold one sample's (n = 1, from make()),
// and an op that gets a tensor of several samples takes n from the tensor
// (with_n) rather than from the caller.
struct ConvShape {
  int64_t n = 1, channels = 0, height = 0, width = 0;
  int64_t kernel = 1, stride = 1, pad = 0;
  int64_t out_h = 0, out_w = 0;

  // The geometry with out_h, out_w computed from the input size, kernel, stride and pad.
  HD static ConvShape make(int64_t n, int64_t channels, int64_t height, int64_t width, int64_t kernel,
                           int64_t stride, int64_t pad) {
    const int64_t out_h = (height + 2 * pad - kernel) / stride + 1,
                  out_w = (width + 2 * pad - kernel) / stride + 1;
    return {n, channels, height, width, kernel, stride, pad, out_h, out_w};
  }
  // The same geometry for a chunk of `samples` samples.
  HD ConvShape with_n(int64_t samples) const {
    ConvShape s = *this;
    s.n = samples;
    return s;
  }

  HD int64_t out_pixels() const { return out_h * out_w; }
  HD int64_t col_rows() const { return channels * kernel * kernel; }
  HD int64_t col_count() const { return col_rows() * n * out_pixels(); }
  HD int64_t sample_in_count() const { return channels * height * width; }
  HD int64_t in_count() const { return n * sample_in_count(); }
};

// cols[idx] of im2col (0 where the kernel reads padding).
template <typename T>
HD T im2col_element(const T* x, const ConvShape& g, int64_t idx) {
  const int64_t pixels = g.out_pixels(), cols_per_row = g.n * pixels;
  const int64_t row = idx / cols_per_row, col = idx % cols_per_row;
  const int64_t s = col / pixels, pix = col % pixels;
  const int64_t oh = pix / g.out_w, ow = pix % g.out_w;
  const int64_t c = row / (g.kernel * g.kernel), ki = (row / g.kernel) % g.kernel, kj = row % g.kernel;
  const int64_t ih = oh * g.stride - g.pad + ki, iw = ow * g.stride - g.pad + kj;
  if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) return T(0);
  return x[((s * g.channels + c) * g.height + ih) * g.width + iw];
}

// dx[idx] of col2im: the sum over (ki, kj), in that order, of the columns that read pixel idx.
template <typename T>
HD T col2im_element(const T* cols, const ConvShape& g, int64_t idx) {
  using C = compute_t<T>;
  const int64_t iw = idx % g.width, ih = (idx / g.width) % g.height;
  const int64_t c = (idx / (g.width * g.height)) % g.channels, s = idx / (g.width * g.height * g.channels);
  const int64_t pixels = g.out_pixels(), cols_per_row = g.n * pixels;
  C acc = C(0);
  for (int64_t ki = 0; ki < g.kernel; ++ki) {
    const int64_t th = ih + g.pad - ki;  // = oh·stride
    if (th < 0) break;                   // only grows more negative with ki
    if (th % g.stride != 0 || th / g.stride >= g.out_h) continue;
    const int64_t oh = th / g.stride;
    for (int64_t kj = 0; kj < g.kernel; ++kj) {
      const int64_t tw = iw + g.pad - kj;
      if (tw < 0) break;
      if (tw % g.stride != 0 || tw / g.stride >= g.out_w) continue;
      const int64_t row = (c * g.kernel + ki) * g.kernel + kj;
      acc += C(cols[row * cols_per_row + s * pixels + oh * g.out_w + tw / g.stride]);
    }
  }
  return T(acc);
}

// dst [b, a, inner] = src [a, b, inner]: the source index of dst element idx.
HD int64_t swap_source_index(int64_t idx, int64_t a, int64_t b, int64_t inner) {
  const int64_t r = idx % inner, ji = idx / inner;  // ji = j·a + i
  const int64_t i = ji % a, j = ji / a;
  return (i * b + j) * inner + r;
}

}  // namespace hpc::kernels
