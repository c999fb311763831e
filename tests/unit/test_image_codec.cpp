// Image decoding and resampling (data/image_codec.h, data/image_resample.h)
// against references:
//  - JPEG: every full decode, and every DCT-scaled one, is bit for bit
//    what libjpeg-turbo's own TurboJPEG tjDecompress2 gives for the same
//    bytes (4:2:0, 4:2:2, 4:4:4, grayscale, progressive, odd sizes); a region
//    decode equals that region of the full decode; CMYK follows PIL's
//    conversion of TurboJPEG's CMYK output;
//  - PNG: gray (8 and 1 bit), gray+alpha, RGB(A), 16-bit and palette+tRNS
//    images written by libpng decode to what PIL's convert("RGB") gives;
//  - damaged files are one ImageError each;
//  - resampling keeps a constant image constant, is the identity at the
//    same size, and the box of a crop of a resized image is that crop.
// (The PIL comparison of whole images is tests/e2e/image_folder.sh.)
#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "data/image_codec.h"
#include "data/image_resample.h"

using hpc::data::decode_jpeg_region;
using hpc::data::decode_rgb;
using hpc::data::ImageError;
using hpc::data::RgbImage;

namespace {

// A photo-like test card: smooth gradients, edges and some noise, so every DCT coefficient matters.
RgbImage card(int64_t h, int64_t w, uint32_t seed = 1) {
  RgbImage im;
  im.height = h, im.width = w;
  im.pixels.resize(static_cast<size_t>(h * w * 3));
  uint32_t r = seed;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        r = r * 1664525u + 1013904223u;
        const double v = 128 + 90 * std::sin(0.21 * double(x) + 0.13 * double(y) + 2.0 * double(c)) +
                         ((x / 7 + y / 5) % 2 ? 20 : -20) + double(r >> 28) - 8;
        im.pixels[static_cast<size_t>((y * w + x) * 3 + c)] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return im;
}

struct Tj {
  tjhandle h;
  explicit Tj(bool compress) : h(compress ? tjInitCompress() : tjInitDecompress()) {}
  ~Tj() { tjDestroy(h); }
};

std::vector<uint8_t> tj_encode(const uint8_t* pixels, int64_t h, int64_t w, int format, int subsamp,
                               int flags) {
  Tj tj(true);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj.h, pixels, int(w), 0, int(h), format, &buf, &size, subsamp, 90, flags), 0)
      << tjGetErrorStr2(tj.h);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  return out;
}

// TurboJPEG's decode at scale n/8, in `format` (TJPF_RGB or TJPF_CMYK).
std::vector<uint8_t> tj_decode(const std::vector<uint8_t>& jpeg, int n, int format, int64_t& h, int64_t& w) {
  Tj tj(false);
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  EXPECT_EQ(tjDecompressHeader3(tj.h, jpeg.data(), jpeg.size(), &width, &height, &subsamp, &colorspace), 0);
  const tjscalingfactor sf{n, 8};
  w = TJSCALED(width, sf), h = TJSCALED(height, sf);
  std::vector<uint8_t> out(static_cast<size_t>(h * w * tjPixelSize[format]));
  EXPECT_EQ(tjDecompress2(tj.h, jpeg.data(), jpeg.size(), out.data(), int(w), 0, int(h), format, 0), 0)
      << tjGetErrorStr2(tj.h);
  return out;
}

}  // namespace

TEST(ImageCodec, JpegDecodesAsTurboJpegDoes) {
  struct Case {
    int64_t h, w;
    int subsamp, flags;
    const char* name;
  };
  const Case cases[] = {
      {48, 64, TJSAMP_420, 0, "4:2:0"},          {37, 29, TJSAMP_420, 0, "4:2:0 odd"},
      {31, 50, TJSAMP_422, 0, "4:2:2"},          {33, 35, TJSAMP_444, 0, "4:4:4"},
      {45, 61, TJSAMP_GRAY, 0, "grayscale"},     {40, 56, TJSAMP_420, TJFLAG_PROGRESSIVE, "progressive"},
      {375, 500, TJSAMP_420, 0, "500x375 photo"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RgbImage src = card(c.h, c.w);
    const std::vector<uint8_t> jpeg = tj_encode(src.pixels.data(), c.h, c.w, TJPF_RGB, c.subsamp, c.flags);
    for (int n = 1; n <= 8; ++n) {
      int64_t th = 0, tw = 0;
      const std::vector<uint8_t> ref = tj_decode(jpeg, n, TJPF_RGB, th, tw);
      const hpc::data::JpegRegion r = decode_jpeg_region(jpeg.data(), jpeg.size(), n, 0, th, 0, tw);
      ASSERT_EQ(r.image.height, th) << "scale " << n;
      ASSERT_EQ(r.image.width, tw) << "scale " << n;
      ASSERT_EQ(r.image.pixels, ref) << "scale " << n << "/8 differs from tjDecompress2";
      if (n == 8) {
        ASSERT_EQ(decode_rgb(jpeg.data(), jpeg.size()).pixels, ref);
        // The libjpeg decode is the real image, not a copy of something else: close to the source.
        double err = 0;
        for (size_t i = 0; i < ref.size(); ++i) err += std::abs(int(ref[i]) - int(src.pixels[i]));
        if (c.subsamp != TJSAMP_GRAY) {
          EXPECT_LT(err / double(ref.size()), 12.0);
        }
      }
    }
  }
}

TEST(ImageCodec, JpegRegionIsThatPartOfTheImage) {
  for (int subsamp : {TJSAMP_444, TJSAMP_420}) {
    const RgbImage src = card(120, 160, 7);
    const std::vector<uint8_t> jpeg = tj_encode(src.pixels.data(), 120, 160, TJPF_RGB, subsamp, 0);
    for (int n : {8, 5, 3}) {
      int64_t th = 0, tw = 0;
      const std::vector<uint8_t> full = tj_decode(jpeg, n, TJPF_RGB, th, tw);
      for (const auto& [r0, r1, c0, c1] :
           {std::array<int64_t, 4>{0, th, 0, tw}, {10, 50, 30, 90}, {th / 2, th, 17, tw}, {3, 9, 0, 5}}) {
        const int64_t rr1 = std::min(r1, th), cc1 = std::min(c1, tw);
        const hpc::data::JpegRegion r = decode_jpeg_region(jpeg.data(), jpeg.size(), n, r0, rr1, c0, cc1);
        ASSERT_LE(r.first_col, c0);
        ASSERT_GE(r.first_col + r.image.width, cc1);
        ASSERT_EQ(r.image.height, rr1 - r0);
        int64_t worst = 0;
        for (int64_t y = r0; y < rr1; ++y)
          for (int64_t x = c0; x < cc1; ++x)
            for (int64_t ch = 0; ch < 3; ++ch) {
              const int a =
                  r.image.pixels[static_cast<size_t>(((y - r0) * r.image.width + x - r.first_col) * 3 + ch)];
              const int b = full[static_cast<size_t>((y * tw + x) * 3 + ch)];
              worst = std::max<int64_t>(worst, std::abs(a - b));
            }
        EXPECT_EQ(worst, 0) << "subsampling " << subsamp << ", scale " << n << "/8, rows " << r0 << "-" << rr1
                            << ", cols " << c0 << "-" << cc1;
      }
    }
  }
}

TEST(ImageCodec, CmykJpegConvertsAsPil) {
  // TurboJPEG writes a 4-component (YCCK, Adobe) JPEG from CMYK pixels; PIL inverts what libjpeg
  // returns for it and converts with R = K' − K'·C'/255 in its integer rounding.
  const RgbImage src = card(24, 40, 3);
  std::vector<uint8_t> cmyk;
  for (size_t i = 0; i < src.pixels.size(); i += 3)
    cmyk.insert(cmyk.end(),
                {src.pixels[i], src.pixels[i + 1], src.pixels[i + 2], uint8_t(src.pixels[i] / 3)});
  const std::vector<uint8_t> jpeg = tj_encode(cmyk.data(), 24, 40, TJPF_CMYK, TJSAMP_444, 0);
  EXPECT_EQ(hpc::data::read_header(jpeg.data(), jpeg.size()).color, "YCCK");
  int64_t h = 0, w = 0;
  const std::vector<uint8_t> raw = tj_decode(jpeg, 8, TJPF_CMYK, h, w);
  const RgbImage rgb = decode_rgb(jpeg.data(), jpeg.size());
  ASSERT_EQ(rgb.pixels.size(), static_cast<size_t>(h * w * 3));
  for (int64_t p = 0; p < h * w; ++p) {
    const int nk = raw[static_cast<size_t>(p * 4 + 3)];
    for (int c = 0; c < 3; ++c) {
      const int t = (255 - raw[static_cast<size_t>(p * 4 + c)]) * nk + 128;
      const int want = std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255);
      ASSERT_EQ(rgb.pixels[static_cast<size_t>(p * 3 + c)], want) << "pixel " << p << " channel " << c;
    }
  }
}

namespace {

// A PNG through libpng's simplified writer.
std::vector<uint8_t> png_encode(const std::vector<uint8_t>& pixels, int64_t h, int64_t w, uint32_t format,
                                const std::vector<uint8_t>& colormap = {}, int entries = 0) {
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<uint32_t>(w), im.height = static_cast<uint32_t>(h), im.format = format;
  im.colormap_entries = static_cast<uint32_t>(entries);
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_get_memory_size(im, size, 0, pixels.data(), 0,
                                              colormap.empty() ? nullptr : colormap.data()));
  std::vector<uint8_t> out(size);
  EXPECT_TRUE(png_image_write_to_memory(&im, out.data(), &size, 0, pixels.data(), 0,
                                        colormap.empty() ? nullptr : colormap.data()));
  out.resize(size);
  return out;
}

}  // namespace

TEST(ImageCodec, PngModesBecomeRgbAsInPil) {
  const int64_t h = 5, w = 7, n = h * w;
  std::vector<uint8_t> gray(n), ga(2 * n), rgb(3 * n), rgba(4 * n), index(n);
  std::vector<uint8_t> want_gray(3 * n), want_rgb(3 * n), want_pal(3 * n);
  std::vector<uint16_t> rgb16(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    const auto g = static_cast<uint8_t>(i * 7), a = static_cast<uint8_t>(255 - i);
    gray[i] = g;
    ga[2 * i] = g, ga[2 * i + 1] = a;
    for (int c = 0; c < 3; ++c) {
      const auto v = static_cast<uint8_t>(i * 5 + c * 60);
      rgb[3 * i + c] = v, rgba[4 * i + c] = v;
      rgb16[3 * i + c] = static_cast<uint16_t>(v * 256 + 255 - v);
      want_rgb[3 * i + c] = v, want_gray[3 * i + c] = g;
    }
    rgba[4 * i + 3] = a;
    index[i] = static_cast<uint8_t>(i % 3);
  }
  const std::vector<uint8_t> palette = {10, 20,  30, 255, 200, 100,
                                        0,  128, 1,  2,   3,   0};  // RGBA entries, 2 with tRNS
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) want_pal[3 * i + c] = palette[static_cast<size_t>(4 * (i % 3) + c)];

  auto decoded = [](const std::vector<uint8_t>& png) { return decode_rgb(png.data(), png.size()).pixels; };
  EXPECT_EQ(decoded(png_encode(gray, h, w, PNG_FORMAT_GRAY)), want_gray);
  EXPECT_EQ(decoded(png_encode(ga, h, w, PNG_FORMAT_GA)), want_gray) << "gray+alpha: alpha dropped";
  EXPECT_EQ(decoded(png_encode(rgb, h, w, PNG_FORMAT_RGB)), want_rgb);
  EXPECT_EQ(decoded(png_encode(rgba, h, w, PNG_FORMAT_RGBA)), want_rgb)
      << "RGBA: alpha dropped, not composited";
  EXPECT_EQ(decoded(png_encode(index, h, w, PNG_FORMAT_RGBA_COLORMAP, palette, 3)), want_pal);
  // 16-bit samples keep their high byte (PIL's "RGB;16B").
  std::vector<uint8_t> rgb16_bytes(rgb16.size() * 2);
  std::memcpy(rgb16_bytes.data(), rgb16.data(), rgb16_bytes.size());
  EXPECT_EQ(decoded(png_encode(rgb16_bytes, h, w, PNG_FORMAT_LINEAR_RGB)), want_rgb);
  const hpc::data::ImageHeader hdr =
      hpc::data::read_header(png_encode(rgba, h, w, PNG_FORMAT_RGBA).data(), 0 + 200);
  EXPECT_EQ(hdr.width, w);
  EXPECT_EQ(hdr.color, "RGBA");
}

TEST(ImageCodec, DamagedFilesAreImageErrors) {
  const RgbImage src = card(64, 64);
  const std::vector<uint8_t> jpeg = tj_encode(src.pixels.data(), 64, 64, TJPF_RGB, TJSAMP_420, 0);
  auto message = [](const std::vector<uint8_t>& b) -> std::string {
    try {
      decode_rgb(b.data(), b.size());
    } catch (const ImageError& e) {
      return e.what();
    }
    return "(decoded)";
  };
  const std::vector<uint8_t> truncated(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() / 2));
  EXPECT_NE(message(truncated).find("Premature end of JPEG file"), std::string::npos) << message(truncated);
  EXPECT_EQ(message({'h', 'e', 'l', 'l', 'o', '\n'}), "not a JPEG or PNG file");
  EXPECT_EQ(message({}), "not a JPEG or PNG file");
  const std::vector<uint8_t> header_only(jpeg.begin(), jpeg.begin() + 20);
  EXPECT_NE(message(header_only).find("JPEG"), std::string::npos);
  std::vector<uint8_t> png = png_encode(std::vector<uint8_t>(3 * 16 * 16, 7), 16, 16, PNG_FORMAT_RGB);
  png[png.size() - 20] ^= 0x55;  // inside the image data: zlib or the CRC notices
  EXPECT_NE(message(png).find("PNG"), std::string::npos) << message(png);
  const std::vector<uint8_t> png_cut(png.begin(), png.begin() + 40);
  EXPECT_NE(message(png_cut).find("PNG"), std::string::npos) << message(png_cut);
}

namespace {

std::vector<uint8_t> resample(const RgbImage& im, double x0, double y0, double x1, double y1, int64_t oh,
                              int64_t ow) {
  const hpc::data::ResampleAxis rows = hpc::data::bilinear_axis(im.height, y0, y1, oh);
  const hpc::data::ResampleAxis cols = hpc::data::bilinear_axis(im.width, x0, x1, ow);
  std::vector<uint8_t> out(static_cast<size_t>(3 * oh * ow)), scratch;
  hpc::data::resample_rgb({im.pixels.data(), 0, 0, im.height, im.width, im.width * 3}, rows, cols, out.data(),
                          scratch);
  return out;
}

// Interleaved → planar.
std::vector<uint8_t> planar(const RgbImage& im) {
  std::vector<uint8_t> p(im.pixels.size());
  const int64_t plane = im.height * im.width;
  for (int64_t i = 0; i < plane; ++i)
    for (int64_t c = 0; c < 3; ++c)
      p[static_cast<size_t>(c * plane + i)] = im.pixels[static_cast<size_t>(3 * i + c)];
  return p;
}

}  // namespace

TEST(ImageResample, IdentityConstantAndCropOfResize) {
  const RgbImage im = card(30, 41);
  EXPECT_EQ(resample(im, 0, 0, 41, 30, 30, 41), planar(im)) << "same size: the identity";
  RgbImage flat = im;
  std::fill(flat.pixels.begin(), flat.pixels.end(), 77);
  for (const auto& [oh, ow] : {std::pair<int64_t, int64_t>{7, 9}, {64, 50}, {30, 3}}) {
    const std::vector<uint8_t> out = resample(flat, 2.5, 1, 40, 29.5, oh, ow);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 77; })) << oh << "x" << ow;
  }
  // Resize 41x30 to 82x60 and crop [10, 50) x [6, 46): the box [5, 25) x [3, 23) of the source.
  const std::vector<uint8_t> big = resample(im, 0, 0, 41, 30, 60, 82);
  const std::vector<uint8_t> box = resample(im, 5, 3, 25, 23, 40, 40);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 40; ++y)
      for (int64_t x = 0; x < 40; ++x)
        ASSERT_EQ(box[static_cast<size_t>((c * 40 + y) * 40 + x)],
                  big[static_cast<size_t>((c * 60 + y + 6) * 82 + x + 10)])
            << c << "," << y << "," << x;
  // Shrinking reads every pixel under the footprint (antialiasing): 41 → 4 columns use them all.
  const hpc::data::ResampleAxis a = hpc::data::bilinear_axis(41, 0, 41, 4);
  EXPECT_EQ(a.lo, 0);
  EXPECT_EQ(a.hi, 41);
  EXPECT_GE(a.taps, 2 * 11 + 1);
}
