// Data augmentation for image batches, applied by the training loader's
// worker threads:
//
//   data.augment = flip, crop:4
//   data.augment = random_resized_crop:224, flip, color_jitter:0.4
//
//   flip     horizontal flip with probability 1/2
//   crop:P   pad by P on every side, then crop H × W back at a random offset
//            in [0, 2P]²; the padding is the value a raw 0 becomes after the
//            dataset's scale/mean/std (uint8 data), i.e. 0 for float data:
//            torchvision's RandomCrop(padding=P) on the unnormalised image
//   random_resized_crop:S[:SMIN-SMAX[:RMIN-RMAX]]
//            torchvision's RandomResizedCrop(S, scale=(SMIN, SMAX),
//            ratio=(RMIN, RMAX)), defaults 0.08-1 and 3/4-4/3: a box of a
//            random share of the area and aspect ratio, resized to S × S
//            (data packed as JPEG: `hpcdata pack --from image-folder`)
//   color_jitter:B[:C[:S[:H]]]
//            torchvision's ColorJitter(B, C, S, H) (one number: B = C = S,
//            H = 0), in a random order per sample (JPEG data)
//
// flip and crop change gathered float batches (augment_batch); the other
// two act while a JPEG is decoded (data/image_pipeline.h), where flip then
// happens too. Every choice for a sample is a pure function of (seed, epoch,
// sample index) — counter-based RNG streams keyed by them — so a sample looks
// the same in an epoch whichever rank, batch or loader thread handles it: N
// ranks equal one rank with the N-times batch, and a resumed run is bitwise
// an uninterrupted one. Validation and evaluation batches are never
// augmented.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace hpc::data {

struct Augment {
  bool flip = false;
  int64_t crop = 0;  // padding P; 0 = no crop
  // random_resized_crop: output side (0 = off), area share and aspect-ratio ranges.
  int64_t resized_crop = 0;
  double scale_lo = 0.08, scale_hi = 1.0, ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
  // color_jitter: factor ranges [max(0, 1 − v), 1 + v] (hue: [−h, h] of a turn); all 0 = off.
  double brightness = 0, contrast = 0, saturation = 0, hue = 0;

  bool jitter() const { return brightness > 0 || contrast > 0 || saturation > 0 || hue > 0; }
  // Acts while an image is decoded: needs JPEG-stored data.
  bool decodes() const { return resized_crop > 0 || jitter(); }
  bool any() const { return flip || crop > 0 || decodes(); }
  std::string str() const;  // canonical: "random_resized_crop:224, flip, color_jitter:0.4", or "none"
};

// "flip, crop:4" (any order, comma or space separated), "" or "none". Throws
// UserError naming the bad word.
Augment parse_augment(const std::string& text);

// UserError unless `sample` (no batch dimension) is an image C × H × W that a
// crop of `a` fits, and `a` asks nothing of decoding (`what` names the data).
void check_augment(const Augment& a, const Shape& sample, const std::string& what);

// flip and crop on rows [0, n) of x (float32 [rows, C, H, W]) in place; row
// i is sample indices[i]. `pad` is the padding value (see above).
void augment_batch(const Augment& a, const Tensor& x, const int64_t* indices, int64_t n, uint64_t seed,
                   int64_t epoch, float pad);

}  // namespace hpc::data
