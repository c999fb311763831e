// One stored image (JPEG or PNG bytes) to one normalised float sample
// C × S × S: the box of the source to use, decoding only what the box needs,
// resampling, colour jitter, flip, normalisation — the work the training
// loader's threads do for data packed with `hpcdata pack --from image-folder
// --store jpeg`.
//
// Boxes. Training with random_resized_crop:S draws torchvision's
// RandomResizedCrop box (up to 10 tries of an area share in [SMIN, SMAX] and
// a log-uniform aspect ratio in [RMIN, RMAX], the box placed uniformly;
// else the whole image cut to the ratio range, centred). Otherwise — and
// always for validation — the box is torchvision's Resize(round(S/0.875))
// then CenterCrop(S) (256 → 224), mapped back onto the source, so only the
// crop is resampled.
//
// Decoding. Only the rows and columns the filter reads are decoded
// (image_codec.h), and for training draws at the smallest DCT scale n/8 at
// which the box still has S pixels or more on both sides (a 400-pixel box
// for a 224 output decodes at 5/8). The box then goes through PIL's
// bilinear resampling (image_resample.h). A DCT-scaled decode averages
// 8/n-pixel blocks where PIL's triangle filter would blur wider, so a
// training crop is slightly sharper than torchvision's; the validation view
// decodes at full size and is torchvision's eval transform to within a
// grey level (tests/e2e/image_torchvision.sh). So a sample is a function of
// the stored bytes and the box, on every machine.
//
// Draws. Every random number of a sample is kernels::random_uniform(seed,
// IMAGE_STREAM, counter) with counter = ((epoch·2^40 + index)·64 + k): the
// crop's tries use k = 0..39, flip 40, jitter's order 41..43 and factors
// 44..47. Nothing depends on the thread, the batch or the rank.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "data/augment.h"
#include "data/image_codec.h"

namespace hpc::data {

// The sample's coordinates of the counter-based RNG.
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0, index = 0;
  double uniform(int k) const;  // in [0, 1)
};

// A box of the source image in pixels: [x0, x1) × [y0, y1), fractional allowed.
struct CropBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// torchvision's RandomResizedCrop.get_params for an image of height × width.
CropBox random_resized_crop_box(int64_t height, int64_t width, const Augment& a, const SampleKey& key);
// torchvision's Resize(round(size / 0.875)) + CenterCrop(size), as a box of the source.
CropBox center_crop_box(int64_t height, int64_t width, int64_t size);
// The side the short side is resized to before the centre crop: round(size / 0.875).
int64_t validation_resize(int64_t size);
// The JPEG DCT scale n (of n/8) at which `box` keeps >= out pixels on both sides.
int jpeg_scale_for(int64_t height, int64_t width, const CropBox& box, int64_t out_h, int64_t out_w);

// Buffers one thread reuses from sample to sample.
struct ImageScratch {
  std::vector<uint8_t> pixels, mid, planar;
  std::vector<float> jitter;
};

class ImagePipeline {
 public:
  // Output 3 × size × size; value = (byte/255 − mean[c]) / std[c].
  ImagePipeline(int64_t size, std::array<double, 3> mean, std::array<double, 3> std);

  int64_t size() const { return size_; }
  // Decodes `bytes` into out (3 × size × size floats). `augment` null: the
  // validation box, nothing random; else its crop, flip and jitter drawn
  // from `key`. Throws ImageError.
  void run(const uint8_t* bytes, size_t n, const Augment* augment, const SampleKey& key, float* out,
           ImageScratch& scratch) const;
  // The 8-bit planar image before normalisation (tests, benchmarks).
  void decode_planar(const uint8_t* bytes, size_t n, const Augment* augment, const SampleKey& key,
                     ImageScratch& scratch) const;

 private:
  int64_t size_;
  std::array<float, 3> gain_{}, offset_{};
};

}  // namespace hpc::data
