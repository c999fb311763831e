// The image pipeline's random choices and views (data/image_pipeline.h):
//  - random_resized_crop over 10,000 draws of a 500x375 image: every box
//    inside the image, area share and aspect ratio inside the stated ranges
//    (to the rounding of the sides), and the same distribution as an
//    independent transcription of torchvision's get_params driven by
//    std::mt19937_64 (two-sample Kolmogorov–Smirnov on the share, the ratio
//    and the position); positions uniform;
//  - every draw a pure function of (seed, epoch, index): the same sample
//    twice is the same bits, another epoch another crop; flip mirrors;
//  - the validation box is torchvision's Resize + CenterCrop; the DCT scale
//    keeps at least the output's pixels;
//  - data.augment's new words parse and print back.
// With HPC_IMAGE_DUMP=DIR set, DumpForTorchvision writes the 10,000 boxes
// (and validation views of the JPEGs listed in DIR/files.txt) for
// tests/e2e/image_folder.sh to compare with torchvision itself.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/augment.h"
#include "data/image_codec.h"
#include "data/image_pipeline.h"

using hpc::data::Augment;
using hpc::data::CropBox;
using hpc::data::parse_augment;
using hpc::data::SampleKey;

namespace {

constexpr int64_t H = 375, W = 500, DRAWS = 10000;

std::vector<CropBox> our_boxes(const Augment& a, uint64_t seed = 42) {
  std::vector<CropBox> b;
  for (int64_t i = 0; i < DRAWS; ++i) b.push_back(random_resized_crop_box(H, W, a, SampleKey{seed, 0, i}));
  return b;
}

// torchvision's RandomResizedCrop.get_params, written again from its documentation, with another RNG.
std::vector<CropBox> reference_boxes(const Augment& a) {
  std::mt19937_64 gen(12345);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<CropBox> out;
  const double area = double(H * W);
  for (int64_t n = 0; n < DRAWS; ++n) {
    bool done = false;
    for (int t = 0; t < 10 && !done; ++t) {
      const double target = area * (a.scale_lo + (a.scale_hi - a.scale_lo) * u(gen));
      const double ratio =
          std::exp(std::log(a.ratio_lo) + (std::log(a.ratio_hi) - std::log(a.ratio_lo)) * u(gen));
      const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * ratio)));
      const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / ratio)));
      if (0 < w && w <= W && 0 < h && h <= H) {
        const auto i = static_cast<int64_t>(u(gen) * double(H - h + 1)),
                   j = static_cast<int64_t>(u(gen) * double(W - w + 1));
        out.push_back({double(j), double(i), double(j + w), double(i + h)});
        done = true;
      }
    }
    if (!done) {
      const double r = double(W) / double(H);
      int64_t w = W, h = H;
      if (r < a.ratio_lo) h = static_cast<int64_t>(std::nearbyint(double(w) / a.ratio_lo));
      if (r > a.ratio_hi) w = static_cast<int64_t>(std::nearbyint(double(h) * a.ratio_hi));
      const int64_t left = (W - w) / 2, top = (H - h) / 2;  // torchvision's integer division
      out.push_back({double(left), double(top), double(left + w), double(top + h)});
    }
  }
  return out;
}

// The two-sample Kolmogorov–Smirnov statistic.
double ks(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  double d = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::fabs(double(i) / double(a.size()) - double(j) / double(b.size())));
  }
  return d;
}

// KS critical value at α = 0.001 for two samples of n: 1.95·sqrt(2/n).
double ks_limit(size_t n) { return 1.95 * std::sqrt(2.0 / double(n)); }

double share(const CropBox& b) { return (b.x1 - b.x0) * (b.y1 - b.y0) / double(H * W); }
double ratio(const CropBox& b) { return (b.x1 - b.x0) / (b.y1 - b.y0); }

std::vector<double> map(const std::vector<CropBox>& v, double (*f)(const CropBox&)) {
  std::vector<double> out;
  out.reserve(v.size());
  for (const CropBox& b : v) out.push_back(f(b));
  return out;
}

std::vector<uint8_t> test_jpeg(int64_t h, int64_t w) {
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3));
  for (int64_t i = 0; i < h * w * 3; ++i)
    px[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + i / 97) % 251);
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  tjCompress2(tj, px.data(), int(w), 0, int(h), TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

}  // namespace

TEST(ImageAugment, ParsesTheNewWords) {
  const Augment a = parse_augment("random_resized_crop:224, flip, color_jitter:0.4");
  EXPECT_EQ(a.resized_crop, 224);
  EXPECT_DOUBLE_EQ(a.scale_lo, 0.08);
  EXPECT_DOUBLE_EQ(a.ratio_hi, 4.0 / 3.0);
  EXPECT_TRUE(a.flip && a.decodes());
  EXPECT_DOUBLE_EQ(a.contrast, 0.4);
  EXPECT_DOUBLE_EQ(a.hue, 0);
  EXPECT_EQ(a.str(), "random_resized_crop:224, flip, color_jitter:0.4");
  const Augment b = parse_augment("color_jitter:0.2:0.3:0.4:0.1 random_resized_crop:96:0.35-1:0.5-2");
  EXPECT_EQ(b.str(), "random_resized_crop:96:0.35-1:0.5-2, color_jitter:0.2:0.3:0.4:0.1");
  EXPECT_EQ(parse_augment(b.str()).str(), b.str());
  for (const char* bad :
       {"random_resized_crop", "random_resized_crop:0", "random_resized_crop:224:0.5",
        "random_resized_crop:224:0-1", "random_resized_crop:224:0.5-1.2", "random_resized_crop:224:0.5-1:2-1",
        "color_jitter", "color_jitter:x", "color_jitter:0.1:0.1:0.1:0.7", "crop:4 random_resized_crop:32"})
    EXPECT_THROW(parse_augment(bad), hpc::UserError) << bad;
  // The float-batch path refuses what only a decoder can do.
  EXPECT_THROW(hpc::data::check_augment(a, hpc::Shape{3, 32, 32}, "/train"), hpc::UserError);
}

TEST(ImageAugment, RandomResizedCropDistribution) {
  for (const char* text : {"random_resized_crop:224", "random_resized_crop:224:0.35-1:0.5-2"}) {
    SCOPED_TRACE(text);
    const Augment a = parse_augment(text);
    const std::vector<CropBox> ours = our_boxes(a), ref = reference_boxes(a);
    for (const CropBox& b : ours) {
      ASSERT_GE(b.x0, 0);
      ASSERT_GE(b.y0, 0);
      ASSERT_LE(b.x1, W);
      ASSERT_LE(b.y1, H);
      ASSERT_GE(b.x1 - b.x0, 1);
      ASSERT_GE(b.y1 - b.y0, 1);
      ASSERT_EQ(b.x0, std::floor(b.x0));  // whole pixels, like torchvision's
      // The stated ranges, to the rounding of each side to a whole pixel (or the centred fallback, whole).
      const double w = b.x1 - b.x0, h = b.y1 - b.y0, s = share(b), r = ratio(b);
      const double slack = 1.0 / std::min(w, h) + 1.0 / std::max(w, h);
      const bool fallback = w == W || h == H;
      if (!fallback) {
        ASSERT_GE(s, a.scale_lo * (1 - 2 * slack));
        ASSERT_LE(s, a.scale_hi * (1 + 2 * slack));
        ASSERT_GE(r, a.ratio_lo * (1 - 2 * slack));
        ASSERT_LE(r, a.ratio_hi * (1 + 2 * slack));
      }
    }
    EXPECT_LT(ks(map(ours, share), map(ref, share)), ks_limit(DRAWS)) << "area share";
    EXPECT_LT(ks(map(ours, ratio), map(ref, ratio)), ks_limit(DRAWS)) << "aspect ratio";
    auto left = [](const CropBox& b) { return b.x0; };
    std::vector<double> lo, lr;
    for (size_t i = 0; i < ours.size(); ++i) lo.push_back(left(ours[i])), lr.push_back(left(ref[i]));
    EXPECT_LT(ks(lo, lr), ks_limit(DRAWS)) << "position";
    // Positions are uniform over the free space: x0 / (W − w) against U(0, 1).
    std::vector<double> pos, uni;
    for (const CropBox& b : ours)
      if (b.x1 - b.x0 < W - 10) pos.push_back(b.x0 / (W - (b.x1 - b.x0)));
    for (size_t i = 0; i < pos.size(); ++i) uni.push_back((double(i) + 0.5) / double(pos.size()));
    EXPECT_LT(ks(pos, uni), 1.95 / std::sqrt(double(pos.size()))) << "placement";
    // The mean share of the area is that of the reference, and well inside the range.
    double m = 0, mr = 0;
    for (size_t i = 0; i < ours.size(); ++i) m += share(ours[i]), mr += share(ref[i]);
    EXPECT_NEAR(m / DRAWS, mr / DRAWS, 0.01);
  }
}

TEST(ImageAugment, DrawsArePureFunctionsOfSeedEpochIndex) {
  const std::vector<uint8_t> jpeg = test_jpeg(96, 128);
  const hpc::data::ImagePipeline p(32, {0.5, 0.5, 0.5}, {0.25, 0.25, 0.25});
  const Augment rrc = parse_augment("random_resized_crop:32, color_jitter:0.3:0.3:0.3:0.05");
  Augment rrc_flip = rrc;
  rrc_flip.flip = true;
  hpc::data::ImageScratch scratch;
  auto run = [&](const Augment* a, const SampleKey& k) {
    std::vector<float> out(3 * 32 * 32);
    p.run(jpeg.data(), jpeg.size(), a, k, out.data(), scratch);
    return out;
  };
  EXPECT_EQ(run(&rrc, {7, 3, 11}), run(&rrc, {7, 3, 11}));
  EXPECT_NE(run(&rrc, {7, 3, 11}), run(&rrc, {7, 4, 11}));
  EXPECT_NE(run(&rrc, {7, 3, 11}), run(&rrc, {7, 3, 12}));
  EXPECT_NE(run(&rrc, {7, 3, 11}), run(&rrc, {8, 3, 11}));
  EXPECT_EQ(run(nullptr, {7, 3, 11}), run(nullptr, {9, 9, 9})) << "the validation view draws nothing";
  int flipped = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const SampleKey k{1, 0, i};
    const std::vector<float> a = run(&rrc, k), b = run(&rrc_flip, k);
    if (a == b) continue;
    ++flipped;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x)
          ASSERT_EQ(b[static_cast<size_t>((c * 32 + y) * 32 + x)],
                    a[static_cast<size_t>((c * 32 + y) * 32 + 31 - x)]);
  }
  EXPECT_GT(flipped, 10);
  EXPECT_LT(flipped, 30);
}

TEST(ImageAugment, ValidationBoxAndDctScale) {
  // torchvision: Resize(256) of 500x375 is 341x256, CenterCrop(224) starts at (58, 16) (58.5 rounds to even).
  EXPECT_EQ(hpc::data::validation_resize(224), 256);
  const CropBox b = hpc::data::center_crop_box(375, 500, 224);
  EXPECT_DOUBLE_EQ(b.x0, 58 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(b.y0, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(b.x1, (58 + 224) * 500.0 / 341);
  // The DCT scale keeps >= 224 pixels of the box on both sides: 400x300 decodes at 6/8 (300 → 226),
  // 500x500 of 1000x750 at 4/8, 400x400 at 5/8, a 200-pixel box (upscaled) at 8/8.
  EXPECT_EQ(hpc::data::jpeg_scale_for(375, 500, {0, 0, 400, 300}, 224, 224), 6);
  EXPECT_EQ(hpc::data::jpeg_scale_for(750, 1000, {0, 0, 500, 500}, 224, 224), 4);
  EXPECT_EQ(hpc::data::jpeg_scale_for(1000, 1000, {0, 0, 400, 400}, 224, 224), 5);
  EXPECT_EQ(hpc::data::jpeg_scale_for(375, 500, {0, 0, 200, 200}, 224, 224), 8);
}

TEST(ImageAugment, DumpForTorchvision) {
  const char* dir = std::getenv("HPC_IMAGE_DUMP");
  if (!dir) GTEST_SKIP() << "HPC_IMAGE_DUMP not set (tests/e2e/image_folder.sh sets it)";
  std::FILE* f = std::fopen((std::string(dir) + "/boxes.txt").c_str(), "w");
  ASSERT_TRUE(f);
  for (const CropBox& b : our_boxes(parse_augment("random_resized_crop:224")))
    std::fprintf(f, "%g %g %g %g\n", b.x0, b.y0, b.x1, b.y1);
  std::fclose(f);
  // Validation views: DIR/files.txt lists "SIZE PATH" lines; each view goes to PATH.u8 (planar 3 x S x S).
  std::ifstream list(std::string(dir) + "/files.txt");
  hpc::data::ImageScratch scratch;
  for (int64_t size = 0; list >> size;) {
    std::string path;
    list >> path;
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    hpc::data::ImagePipeline(size, {0, 0, 0}, {1, 1, 1})
        .decode_planar(bytes.data(), bytes.size(), nullptr, SampleKey{}, scratch);
    std::ofstream(path + ".u8", std::ios::binary)
        .write(reinterpret_cast<const char*>(scratch.planar.data()),
               static_cast<std::streamsize>(scratch.planar.size()));
  }
}
