// Image augmentation (see augment.h).
#include "data/augment.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

namespace {

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

// "0.08-1" → (0.08, 1); false when the text is not two numbers joined by '-'.
bool parse_range(const std::string& text, double& lo, double& hi) {
  const size_t dash = text.find('-', 1);
  if (dash == std::string::npos) return false;
  char* end = nullptr;
  lo = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + dash) return false;
  hi = std::strtod(text.c_str() + dash + 1, &end);
  return end == text.c_str() + text.size() && dash + 1 < text.size();
}

std::vector<std::string> split_colons(const std::string& w) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (size_t colon; (colon = w.find(':', at)) != std::string::npos; at = colon + 1)
    parts.push_back(w.substr(at, colon - at));
  parts.push_back(w.substr(at));
  return parts;
}

void parse_resized_crop(const std::string& w, Augment& a) {
  const std::vector<std::string> p = split_colons(w);
  const std::string example = " (e.g. random_resized_crop:224 or random_resized_crop:224:0.08-1:0.75-1.333)";
  const bool digits =
      p.size() >= 2 && !p[1].empty() && p[1].size() <= 5 && std::all_of(p[1].begin(), p[1].end(), ::isdigit);
  if (!digits || p.size() > 4 || std::stoll(p[1]) < 1 || std::stoll(p[1]) > 16384)
    throw UserError("'" + w + "': random_resized_crop needs an output size of 1 to 16384 pixels" + example);
  a.resized_crop = std::stoll(p[1]);
  if (p.size() >= 3 && !(parse_range(p[2], a.scale_lo, a.scale_hi) && a.scale_lo > 0 &&
                         a.scale_lo <= a.scale_hi && a.scale_hi <= 1))
    throw UserError("'" + w + "': the area range must be SMIN-SMAX with 0 < SMIN <= SMAX <= 1" + example);
  if (p.size() == 4 &&
      !(parse_range(p[3], a.ratio_lo, a.ratio_hi) && a.ratio_lo > 0 && a.ratio_lo <= a.ratio_hi))
    throw UserError("'" + w + "': the aspect-ratio range must be RMIN-RMAX with 0 < RMIN <= RMAX" + example);
}

void parse_jitter(const std::string& w, Augment& a) {
  const std::vector<std::string> p = split_colons(w);
  const std::string bad = "'" + w +
                          "': color_jitter takes brightness, contrast, saturation (>= 0) and hue (0 to 0.5), "
                          "e.g. color_jitter:0.4 or color_jitter:0.4:0.4:0.4:0.1";
  if (p.size() < 2 || p.size() > 5) throw UserError(bad);
  double v[4] = {0, 0, 0, 0};
  for (size_t i = 1; i < p.size(); ++i) {
    char* end = nullptr;
    v[i - 1] = std::strtod(p[i].c_str(), &end);
    if (p[i].empty() || end != p[i].c_str() + p[i].size() || !(v[i - 1] >= 0 && v[i - 1] <= 1e3))
      throw UserError(bad);
  }
  if (p.size() == 2) v[1] = v[2] = v[0];  // one number: brightness = contrast = saturation
  if (v[3] > 0.5) throw UserError(bad);
  a.brightness = v[0], a.contrast = v[1], a.saturation = v[2], a.hue = v[3];
}

}  // namespace

std::string Augment::str() const {
  if (!any()) return "none";
  std::vector<std::string> words;
  if (resized_crop > 0) {
    std::string w = "random_resized_crop:" + std::to_string(resized_crop);
    const bool ratio = ratio_lo != 3.0 / 4.0 || ratio_hi != 4.0 / 3.0;
    if (ratio || scale_lo != 0.08 || scale_hi != 1.0) w += ":" + number(scale_lo) + "-" + number(scale_hi);
    if (ratio) w += ":" + number(ratio_lo) + "-" + number(ratio_hi);
    words.push_back(w);
  }
  if (flip) words.emplace_back("flip");
  if (crop > 0) words.push_back("crop:" + std::to_string(crop));
  if (jitter()) {
    std::string w = "color_jitter:" + number(brightness);
    if (!(contrast == brightness && saturation == brightness && hue == 0))
      w += ":" + number(contrast) + ":" + number(saturation) + ":" + number(hue);
    words.push_back(w);
  }
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : ", ") + w;
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
    } else if (w.rfind("random_resized_crop:", 0) == 0 || w == "random_resized_crop") {
      parse_resized_crop(w, a);
    } else if (w.rfind("color_jitter:", 0) == 0 || w == "color_jitter") {
      parse_jitter(w, a);
    } else {
      throw UserError("unknown augmentation '" + w +
                      "' (known: flip, crop:P, random_resized_crop:SIZE, color_jitter:B[:C:S:H], none)");
    }
  }
  if (a.crop > 0 && a.resized_crop > 0)
    throw UserError("crop:" + std::to_string(a.crop) + " and random_resized_crop both crop: use one of them");
  return a;
}

void check_augment(const Augment& a, const Shape& sample, const std::string& what) {
  if (!a.any()) return;
  if (a.decodes())
    throw UserError("option --data.augment " + a.str() +
                    ": random_resized_crop and color_jitter act while "
                    "images are decoded, but " +
                    what +
                    " holds decoded pixels: pack the image folder with "
                    "`hpcdata pack --from image-folder DIR --store jpeg` (or use flip, crop:P)");
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
