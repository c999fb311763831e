// Resizing 8-bit RGB images: PIL's bilinear filter (Image.resize(...,
// BILINEAR), which torchvision's Resize and RandomResizedCrop use on PIL
// images), in PIL's arithmetic, so `hpcdata pack --store raw` gives the
// pixels a PIL pipeline would.
//
// The filter is the triangle of support 1, widened by the reduction factor
// when shrinking (an antialiasing filter: every input pixel under the
// footprint of an output pixel contributes). Weights are computed in double,
// normalised per output pixel, then rounded to 22-bit fixed point; the
// image is resampled horizontally into an 8-bit intermediate (rounded and
// clipped), then vertically — PIL's order, rounding and clipping exactly.
// A source box (x0, y0, x1, y1) in input pixels, fractional allowed, maps
// onto the output: resampling the box of a crop of a resized image is the
// same as resizing and then cropping, without computing the rest.
//
// The output is planar (C × H × W), the layout the model takes; the input
// may be a region of a larger image (a partially decoded JPEG), given with
// the full image's coordinates of its first row and column.
#pragma once

#include <cstdint>
#include <vector>

namespace hpc::data {

// The weights for one axis: output position o reads inputs
// [first[o], first[o] + count[o]) with weights[o·taps + k].
struct ResampleAxis {
  int64_t in_size = 0, out_size = 0, taps = 0;
  std::vector<int32_t> first, count, weights;
  int64_t lo = 0, hi = 0;  // the inputs any output reads: [lo, hi)
};

// PIL's precompute_coeffs + normalize_coeffs_8bpc for the box [b0, b1) of an axis of in_size pixels.
ResampleAxis bilinear_axis(int64_t in_size, double b0, double b1, int64_t out_size);

// A region of an interleaved RGB image: rows [row0, row0 + rows) and
// columns [col0, col0 + cols) of the full image, `stride` bytes per row.
struct RgbRegion {
  const uint8_t* pixels = nullptr;
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0, stride = 0;
};

// out[c][y][x] (3 × rows.out_size × cols.out_size) from `in`, which must
// cover rows [rows.lo, rows.hi) and columns [cols.lo, cols.hi). `scratch`
// holds the intermediate image (reused between calls).
void resample_rgb(const RgbRegion& in, const ResampleAxis& rows, const ResampleAxis& cols, uint8_t* out,
                  std::vector<uint8_t>& scratch);

}  // namespace hpc::data
