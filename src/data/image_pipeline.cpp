// Stored image → normalised float sample (see image_pipeline.h).
#include "data/image_pipeline.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/image_resample.h"
#include "kernels/random.h"

namespace hpc::data {

namespace {

constexpr uint64_t IMAGE_STREAM = 0x696d6731;  // "img1": no other user of the counter-based RNG takes it
constexpr int CROP_TRIES = 10;                 // torchvision's
constexpr int K_FLIP = 40, K_ORDER = 41, K_FACTORS = 44;

// Python's round(): halves to even (the default floating-point rounding mode).
int64_t py_round(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// ---- colour jitter (torchvision's ColorJitter, in float on 0-255 values) ----

// ITU-R 601 luma, the weights PIL's convert("L") uses.
inline float luma(float r, float g, float b) { return 0.299f * r + 0.587f * g + 0.114f * b; }

inline float clamp255(float v) { return std::min(255.0f, std::max(0.0f, v)); }

void blend_with(float* v, const float* base, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = clamp255(base[i] + (v[i] - base[i]) * factor);
}

void rotate_hue(float* r, float* g, float* b, int64_t n, float shift) {
  for (int64_t i = 0; i < n; ++i) {
    const float mx = std::max({r[i], g[i], b[i]}), mn = std::min({r[i], g[i], b[i]}), d = mx - mn;
    if (d <= 0) continue;  // grey: no hue to turn
    float h = mx == r[i]   ? (g[i] - b[i]) / d
              : mx == g[i] ? 2.0f + (b[i] - r[i]) / d
                           : 4.0f + (r[i] - g[i]) / d;
    h = h / 6.0f + shift;
    h -= std::floor(h);
    const float s = d / mx, v = mx, hh = h * 6.0f;
    const int sector = std::min(5, static_cast<int>(hh));
    const float f = hh - static_cast<float>(sector);
    const float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    const float rgb[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    r[i] = rgb[sector][0], g[i] = rgb[sector][1], b[i] = rgb[sector][2];
  }
}

// The four adjustments in the sample's order, each with its factor.
void color_jitter(const Augment& a, const SampleKey& key, float* planes, int64_t plane,
                  std::vector<float>& gray) {
  int order[4] = {0, 1, 2, 3};
  for (int i = 0; i < 3; ++i) {  // Fisher–Yates with draws K_ORDER..K_ORDER + 2
    const int j = i + static_cast<int>(key.uniform(K_ORDER + i) * (4 - i));
    std::swap(order[i], order[std::min(j, 3)]);
  }
  auto factor = [&](int k, double v) {
    const double lo = std::max(0.0, 1.0 - v), hi = 1.0 + v;
    return static_cast<float>(lo + (hi - lo) * key.uniform(K_FACTORS + k));
  };
  float *r = planes, *g = planes + plane, *b = planes + 2 * plane;
  gray.resize(static_cast<size_t>(plane));
  for (int op : order) {
    if (op == 0 && a.brightness > 0) {
      const float f = factor(0, a.brightness);
      for (int64_t i = 0; i < 3 * plane; ++i) planes[i] = clamp255(planes[i] * f);
    } else if (op == 1 && a.contrast > 0) {
      const float f = factor(1, a.contrast);
      double sum = 0;
      for (int64_t i = 0; i < plane; ++i) sum += luma(r[i], g[i], b[i]);
      std::fill(gray.begin(), gray.end(), static_cast<float>(std::floor(sum / double(plane) + 0.5)));
      for (float* c : {r, g, b}) blend_with(c, gray.data(), f, plane);
    } else if (op == 2 && a.saturation > 0) {
      const float f = factor(2, a.saturation);
      for (int64_t i = 0; i < plane; ++i) gray[static_cast<size_t>(i)] = luma(r[i], g[i], b[i]);
      for (float* c : {r, g, b}) blend_with(c, gray.data(), f, plane);
    } else if (op == 3 && a.hue > 0) {
      const double u = key.uniform(K_FACTORS + 3);
      rotate_hue(r, g, b, plane, static_cast<float>(-a.hue + 2 * a.hue * u));
    }
  }
}

}  // namespace

double SampleKey::uniform(int k) const {
  const uint64_t counter =
      ((static_cast<uint64_t>(epoch) << 40) + static_cast<uint64_t>(index)) * 64 + static_cast<uint64_t>(k);
  return kernels::random_uniform(seed, IMAGE_STREAM, counter);
}

CropBox random_resized_crop_box(int64_t height, int64_t width, const Augment& a, const SampleKey& key) {
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(a.ratio_lo), log_hi = std::log(a.ratio_hi);
  for (int t = 0; t < CROP_TRIES; ++t) {
    const double target = area * (a.scale_lo + (a.scale_hi - a.scale_lo) * key.uniform(4 * t));
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * key.uniform(4 * t + 1));
    const int64_t w = py_round(std::sqrt(target * ratio)), h = py_round(std::sqrt(target / ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto i = static_cast<int64_t>(key.uniform(4 * t + 2) * static_cast<double>(height - h + 1));
      const auto j = static_cast<int64_t>(key.uniform(4 * t + 3) * static_cast<double>(width - w + 1));
      return {double(j), double(i), double(j + w), double(i + h)};
    }
  }
  // The fallback: the whole image, cut to the ratio range, centred.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < a.ratio_lo)
    h = py_round(static_cast<double>(w) / a.ratio_lo);
  else if (in_ratio > a.ratio_hi)
    w = py_round(static_cast<double>(h) * a.ratio_hi);
  const int64_t i = (height - h) / 2, j = (width - w) / 2;
  return {double(j), double(i), double(j + w), double(i + h)};
}

int64_t validation_resize(int64_t size) { return py_round(static_cast<double>(size) / 0.875); }

CropBox center_crop_box(int64_t height, int64_t width, int64_t size) {
  // Resize(R): the short side becomes R, the long one int(R · long / short).
  const int64_t r = validation_resize(size);
  const bool wide = width >= height;
  const int64_t short_side = wide ? height : width, long_side = wide ? width : height;
  const auto long_r = static_cast<int64_t>(static_cast<double>(r) * static_cast<double>(long_side) /
                                           static_cast<double>(short_side));
  const int64_t rh = wide ? r : long_r, rw = wide ? long_r : r;
  // CenterCrop(size) of the resized image, mapped back by the resize's scale per axis.
  const int64_t top = py_round(static_cast<double>(rh - size) / 2.0),
                left = py_round(static_cast<double>(rw - size) / 2.0);
  const double sy = static_cast<double>(height) / static_cast<double>(rh),
               sx = static_cast<double>(width) / static_cast<double>(rw);
  return {double(left) * sx, double(top) * sy, double(left + size) * sx, double(top + size) * sy};
}

int jpeg_scale_for(int64_t height, int64_t width, const CropBox& box, int64_t out_h, int64_t out_w) {
  for (int n = 1; n < 8; ++n) {
    const double sx = double(jpeg_scaled_side(width, n)) / double(width),
                 sy = double(jpeg_scaled_side(height, n)) / double(height);
    if ((box.x1 - box.x0) * sx >= double(out_w) && (box.y1 - box.y0) * sy >= double(out_h)) return n;
  }
  return 8;
}

ImagePipeline::ImagePipeline(int64_t size, std::array<double, 3> mean, std::array<double, 3> std)
    : size_(size) {
  HPC_ASSERT(size > 0, "ImagePipeline: size");
  for (int c = 0; c < 3; ++c) {
    gain_[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    offset_[c] = static_cast<float>(-mean[c] / std[c]);
  }
}

void ImagePipeline::decode_planar(const uint8_t* bytes, size_t n, const Augment* augment,
                                  const SampleKey& key, ImageScratch& scratch) const {
  const ImageHeader h = read_header(bytes, n);
  const CropBox box = augment && augment->resized_crop > 0
                          ? random_resized_crop_box(h.height, h.width, *augment, key)
                          : center_crop_box(h.height, h.width, size_);
  scratch.planar.resize(static_cast<size_t>(3 * size_ * size_));
  if (h.format == ImageFormat::Jpeg) {
    // Training draws take the DCT scale; the validation view decodes at full size, so it is
    // torchvision's eval transform (PIL's filter all the way) and not only close to it.
    const int scale = augment ? jpeg_scale_for(h.height, h.width, box, size_, size_) : 8;
    const int64_t sh = jpeg_scaled_side(h.height, scale), sw = jpeg_scaled_side(h.width, scale);
    const double fy = double(sh) / double(h.height), fx = double(sw) / double(h.width);
    const ResampleAxis rows = bilinear_axis(sh, box.y0 * fy, box.y1 * fy, size_);
    const ResampleAxis cols = bilinear_axis(sw, box.x0 * fx, box.x1 * fx, size_);
    JpegRegion region = decode_jpeg_region(bytes, n, scale, rows.lo, rows.hi, cols.lo, cols.hi);
    scratch.pixels.swap(region.image.pixels);
    const RgbRegion in{scratch.pixels.data(), rows.lo,
                       region.first_col,      region.image.height,
                       region.image.width,    region.image.width * 3};
    resample_rgb(in, rows, cols, scratch.planar.data(), scratch.mid);
    return;
  }
  RgbImage image = decode_rgb(bytes, n);
  const ResampleAxis rows = bilinear_axis(image.height, box.y0, box.y1, size_);
  const ResampleAxis cols = bilinear_axis(image.width, box.x0, box.x1, size_);
  const RgbRegion in{image.pixels.data(), 0, 0, image.height, image.width, image.width * 3};
  resample_rgb(in, rows, cols, scratch.planar.data(), scratch.mid);
}

void ImagePipeline::run(const uint8_t* bytes, size_t n, const Augment* augment, const SampleKey& key,
                        float* out, ImageScratch& scratch) const {
  decode_planar(bytes, n, augment, key, scratch);
  const int64_t plane = size_ * size_;
  const bool flip = augment && augment->flip && key.uniform(K_FLIP) < 0.5;
  const bool jitter = augment && augment->jitter();
  if (jitter) {
    scratch.jitter.resize(static_cast<size_t>(3 * plane));
    std::copy(scratch.planar.begin(), scratch.planar.end(), scratch.jitter.begin());
    std::vector<float> gray;
    color_jitter(*augment, key, scratch.jitter.data(), plane, gray);
  }
  for (int64_t c = 0; c < 3; ++c) {
    const float gain = gain_[static_cast<size_t>(c)], offset = offset_[static_cast<size_t>(c)];
    for (int64_t y = 0; y < size_; ++y) {
      float* dst = out + (c * size_ + y) * size_;
      const int64_t at = (c * size_ + y) * size_;
      if (jitter) {
        const float* src = scratch.jitter.data() + at;
        for (int64_t x = 0; x < size_; ++x) dst[flip ? size_ - 1 - x : x] = src[x] * gain + offset;
      } else {
        const uint8_t* src = scratch.planar.data() + at;
        if (flip)
          for (int64_t x = 0; x < size_; ++x) dst[size_ - 1 - x] = static_cast<float>(src[x]) * gain + offset;
        else
          for (int64_t x = 0; x < size_; ++x) dst[x] = static_cast<float>(src[x]) * gain + offset;
      }
    }
  }
}

}  // namespace hpc::data
