// PIL's bilinear resampling in PIL's fixed-point arithmetic (see the header).
#include "data/image_resample.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hpc::data {

namespace {

// Weights are 22-bit fixed point: 8 bits of pixel, 2 bits of headroom for
// filters with negative lobes, in an int32 sum (PIL's PRECISION_BITS).
constexpr int PRECISION_BITS = 32 - 8 - 2;
constexpr int32_t HALF = 1 << (PRECISION_BITS - 1);

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t clip8(int32_t sum) { return static_cast<uint8_t>(std::clamp(sum >> PRECISION_BITS, 0, 255)); }

}  // namespace

ResampleAxis bilinear_axis(int64_t in_size, double b0, double b1, int64_t out_size) {
  HPC_ASSERT(in_size > 0 && out_size > 0 && b1 > b0, "bilinear_axis: sizes");
  // PIL takes the box as C floats.
  const double in0 = static_cast<float>(b0), in1 = static_cast<float>(b1);
  const double scale = (in1 - in0) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // the triangle's support, widened when shrinking
  ResampleAxis a;
  a.in_size = in_size;
  a.out_size = out_size;
  a.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.first.resize(static_cast<size_t>(out_size));
  a.count.resize(static_cast<size_t>(out_size));
  a.weights.assign(static_cast<size_t>(out_size * a.taps), 0);
  const double inv_filterscale = 1.0 / filterscale;  // PIL multiplies by it (not the same bits as dividing)
  std::vector<double> k(static_cast<size_t>(a.taps));
  a.lo = in_size;
  a.hi = 0;
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = in0 + (static_cast<double>(o) + 0.5) * scale;
    // PIL rounds with C's truncating (int)(v + 0.5); floor is the same here: xmin is clamped at 0,
    // and xmax's argument is positive.
    const int64_t xmin = std::max<int64_t>(0, static_cast<int64_t>(std::floor(center - support + 0.5)));
    const int64_t xmax =
        std::min<int64_t>(in_size, static_cast<int64_t>(std::floor(center + support + 0.5))) - xmin;
    double sum = 0;
    for (int64_t x = 0; x < xmax; ++x) {
      k[static_cast<size_t>(x)] = triangle((static_cast<double>(x + xmin) - center + 0.5) * inv_filterscale);
      sum += k[static_cast<size_t>(x)];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = sum != 0.0 ? k[static_cast<size_t>(x)] / sum : k[static_cast<size_t>(x)];
      a.weights[static_cast<size_t>(o * a.taps + x)] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << PRECISION_BITS) : 0.5 + w * (1 << PRECISION_BITS));
    }
    a.first[static_cast<size_t>(o)] = static_cast<int32_t>(xmin);
    a.count[static_cast<size_t>(o)] = static_cast<int32_t>(std::max<int64_t>(xmax, 0));
    if (xmax > 0) {
      a.lo = std::min(a.lo, xmin);
      a.hi = std::max(a.hi, xmin + xmax);
    }
  }
  HPC_ASSERT(a.lo < a.hi, "bilinear_axis: the box reads no input pixel");
  return a;
}

void resample_rgb(const RgbRegion& in, const ResampleAxis& rows, const ResampleAxis& cols, uint8_t* out,
                  std::vector<uint8_t>& scratch) {
  HPC_ASSERT(rows.lo >= in.row0 && rows.hi <= in.row0 + in.rows && cols.lo >= in.col0 &&
                 cols.hi <= in.col0 + in.cols,
             "resample_rgb: the region does not cover the filter's footprint");
  const int64_t out_w = cols.out_size, out_h = rows.out_size, mid_rows = rows.hi - rows.lo;
  const int64_t mid_plane = mid_rows * out_w;
  scratch.resize(static_cast<size_t>(3 * mid_plane));
  // Horizontal: every row the vertical pass reads, into a planar 8-bit intermediate.
  for (int64_t r = rows.lo; r < rows.hi; ++r) {
    const uint8_t* src = in.pixels + (r - in.row0) * in.stride - in.col0 * 3;
    uint8_t* mid = scratch.data() + (r - rows.lo) * out_w;
    for (int64_t x = 0; x < out_w; ++x) {
      const int32_t* w = cols.weights.data() + x * cols.taps;
      const uint8_t* p = src + static_cast<int64_t>(cols.first[static_cast<size_t>(x)]) * 3;
      int32_t s0 = HALF, s1 = HALF, s2 = HALF;
      for (int32_t k = 0; k < cols.count[static_cast<size_t>(x)]; ++k, p += 3) {
        s0 += p[0] * w[k];
        s1 += p[1] * w[k];
        s2 += p[2] * w[k];
      }
      mid[x] = clip8(s0);
      mid[mid_plane + x] = clip8(s1);
      mid[2 * mid_plane + x] = clip8(s2);
    }
  }
  // Vertical: whole rows at a time, so the inner loop runs along x (vectorised).
  std::vector<int32_t> acc(static_cast<size_t>(out_w));
  for (int64_t c = 0; c < 3; ++c) {
    const uint8_t* plane = scratch.data() + c * mid_plane;
    for (int64_t y = 0; y < out_h; ++y) {
      const int32_t* w = rows.weights.data() + y * rows.taps;
      std::fill(acc.begin(), acc.end(), HALF);
      const int64_t first = rows.first[static_cast<size_t>(y)] - rows.lo;
      for (int32_t k = 0; k < rows.count[static_cast<size_t>(y)]; ++k) {
        const uint8_t* src = plane + (first + k) * out_w;
        const int32_t wk = w[k];
        int32_t* a = acc.data();
        for (int64_t x = 0; x < out_w; ++x) a[x] += src[x] * wk;
      }
      uint8_t* dst = out + (c * out_h + y) * out_w;
      for (int64_t x = 0; x < out_w; ++x) dst[x] = clip8(acc[static_cast<size_t>(x)]);
    }
  }
}

}  // namespace hpc::data
