// Data augmentation for image batches (N × C × H × W), applied by the
// training loader's worker threads after a batch is gathered:
//
//   data.augment = flip, crop:4
//
//   flip     horizontal flip with probability 1/2
//   crop:P   pad by P on every side, then crop H × W back at a random offset
//            in [0, 2P]²; the padding is the value a raw 0 becomes after the
//            dataset's scale/mean/std (uint8 data), i.e. 0 for float data:
//            torchvision's RandomCrop(padding=P) on the unnormalised image
//
// Every choice for a sample is a pure function of (seed, epoch, sample
// index): stream AUGMENT_STREAM of the counter-based RNG, counter
// (epoch · 2^40 + index) · 4 + k. So a sample looks the same in an epoch
// whichever rank, batch or loader thread handles it: N ranks equal one rank
// with the N-times batch, and a resumed run is bitwise an uninterrupted one.
// Validation and evaluation batches are never augmented.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace hpc::data {

struct Augment {
  bool flip = false;
  int64_t crop = 0;  // padding P; 0 = no crop
  bool any() const { return flip || crop > 0; }
  std::string str() const;  // "flip, crop:4", or "none"
};

// "flip, crop:4" (any order, comma or space separated), "" or "none". Throws
// UserError naming the bad word.
Augment parse_augment(const std::string& text);

// UserError unless `sample` (no batch dimension) is an image C × H × W that a crop of `a` fits.
void check_augment(const Augment& a, const Shape& sample, const std::string& what);

// Rows [0, n) of x (float32 [rows, C, H, W]) in place; row i is sample
// indices[i]. `pad` is the padding value (see above).
void augment_batch(const Augment& a, const Tensor& x, const int64_t* indices, int64_t n, uint64_t seed,
                   int64_t epoch, float pad);

}  // namespace hpc::data
