// Image augmentation (see augment.h).
#include "data/augment.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "kernels/random.h"

namespace hpc::data {

namespace {

constexpr uint64_t AUGMENT_STREAM = 0x61756731;  // "aug1": no other user of the counter-based RNG takes it

uint64_t draw(uint64_t seed, int64_t epoch, int64_t index, uint64_t k, uint64_t n) {
  const uint64_t counter = ((static_cast<uint64_t>(epoch) << 40) + static_cast<uint64_t>(index)) * 4 + k;
  return static_cast<uint64_t>(kernels::random_uniform(seed, AUGMENT_STREAM, counter) *
                               static_cast<double>(n));
}

}  // namespace

std::string Augment::str() const {
  if (!any()) return "none";
  std::string s = flip ? "flip" : "";
  if (crop > 0) s += (s.empty() ? "" : ", ") + std::string("crop:") + std::to_string(crop);
  return s;
}

Augment parse_augment(const std::string& text) {
  std::string words = text;
  std::replace(words.begin(), words.end(), ',', ' ');
  std::istringstream in(words);
  Augment a;
  for (std::string w; in >> w;) {
    if (w == "none") continue;
    if (w == "flip") {
      a.flip = true;
    } else if (w.rfind("crop:", 0) == 0) {
      const std::string p = w.substr(5);
      const bool digits = !p.empty() && p.size() <= 4 && std::all_of(p.begin(), p.end(), ::isdigit);
      if (!digits || std::stoll(p) < 1)
        throw UserError("'" + w + "': the crop padding must be a positive integer, e.g. crop:4");
      a.crop = std::stoll(p);
    } else {
      throw UserError("unknown augmentation '" + w + "' (known: flip, crop:P, none)");
    }
  }
  return a;
}

void check_augment(const Augment& a, const Shape& sample, const std::string& what) {
  if (!a.any()) return;
  if (sample.rank() != 3)
    throw UserError("option --data.augment " + a.str() + ": needs image samples C×H×W, but " + what +
                    " has " + sample.str());
}

void augment_batch(const Augment& a, const Tensor& x, const int64_t* indices, int64_t n, uint64_t seed,
                   int64_t epoch, float pad) {
  if (!a.any()) return;
  const Shape& s = x.shape();
  const int64_t c = s[1], h = s[2], w = s[3], plane = h * w;
  std::vector<float> src(static_cast<size_t>(c * plane));
  for (int64_t i = 0; i < n; ++i) {
    float* row = x.data<float>() + i * c * plane;
    const bool flip = a.flip && draw(seed, epoch, indices[i], 0, 2) == 1;
    const int64_t p = a.crop;
    const int64_t dy = p > 0 ? static_cast<int64_t>(draw(seed, epoch, indices[i], 1, 2 * p + 1)) - p : 0;
    const int64_t dx = p > 0 ? static_cast<int64_t>(draw(seed, epoch, indices[i], 2, 2 * p + 1)) - p : 0;
    if (!flip && dy == 0 && dx == 0) continue;
    std::copy(row, row + c * plane, src.begin());
    // out(y, x) = in(y + dy, x' + dx) with x' the (flipped) column; outside the image: the padding.
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t yy = 0; yy < h; ++yy) {
        const int64_t sy = yy + dy;
        float* out = row + ch * plane + yy * w;
        if (sy < 0 || sy >= h) {
          std::fill(out, out + w, pad);
          continue;
        }
        const float* in = src.data() + ch * plane + sy * w;
        for (int64_t xx = 0; xx < w; ++xx) {
          const int64_t sx = (flip ? w - 1 - xx : xx) + dx;
          out[xx] = sx < 0 || sx >= w ? pad : in[sx];
        }
      }
  }
}

}  // namespace hpc::data
