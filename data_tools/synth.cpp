// hpcdata synth: a learnable synthetic dataset, for demos and benchmarks.
//
// Classification (K classes): every class c has a prototype p_c whose
// elements are N(0, 1); sample i draws its label uniformly and is
// x = p_label + noise·N(0, 1) per element (noise 1.0 by default), so classes
// are separable and a linear model already learns them.
// Regression (K targets): x is N(0, 1) per element and
// y = W·x/√D + noise·N(0, 1) (noise 0.1 by default) with W's elements N(0, 1).
// uint8 inputs store round(128 + 32·x) clamped to [0, 255] with scale = 1/32,
// mean = 4, std = 1, so hpctrain sees x again (to 1/64); regression targets
// are computed from that stored x, so the relation is exact.
//
// Every value is a pure function of (seed, stream, index) (counter-based
// RNG), so the output does not depend on how it is streamed; /val holds
// samples N … N+M−1 of the same distribution. Rows are generated as they are
// written: the size is bounded by the disk, not by memory.
#include <algorithm>
#include <cmath>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "core/rng.h"

namespace hpc::data_tools {

namespace {

constexpr uint64_t PROTOTYPE_STREAM = 0x70726f74ull << 32;  // "prot" + class
constexpr uint64_t LABEL_STREAM = 0x6c61626cull << 32;      // "labl"
constexpr uint64_t SAMPLE_STREAM = 0x73616d70ull << 32;     // "samp" + sample index
constexpr uint64_t TARGET_STREAM = 0x74617267ull << 32;     // "targ" + sample index
constexpr uint64_t WEIGHT_STREAM = 0x77656967ull << 32;     // "weig"
constexpr double U8_CENTRE = 128, U8_STEP = 32;

struct Model {
  int64_t dim = 0, classes = 0, targets = 0;
  double noise = 1;
  bool u8 = true;
  uint64_t seed = 0;
  std::vector<float> prototypes;  // classes × dim
  std::vector<float> weights;     // targets × dim

  int32_t label(int64_t i) const {
    Rng r(seed, LABEL_STREAM);
    r.set_counter(static_cast<uint64_t>(i));
    return static_cast<int32_t>(std::min<uint64_t>(r.below(static_cast<uint64_t>(classes)), classes - 1));
  }
  // Sample i's values as hpctrain will see them.
  void sample(int64_t i, std::vector<double>& v) const {
    Rng r(seed, SAMPLE_STREAM + static_cast<uint64_t>(i));
    v.resize(static_cast<size_t>(dim));
    const float* proto = targets > 0 ? nullptr : prototypes.data() + label(i) * dim;
    for (int64_t j = 0; j < dim; ++j) {
      double x = (proto ? proto[j] + noise * r.normal() : r.normal());
      if (u8) x = std::clamp(std::round(U8_CENTRE + U8_STEP * x), 0.0, 255.0) / U8_STEP - U8_CENTRE / U8_STEP;
      v[static_cast<size_t>(j)] = x;
    }
  }
};

Array x_array(const std::shared_ptr<const Model>& m, int64_t base, int64_t n, const Shape& shape) {
  return Array{m->u8 ? DType::U8 : DType::F32, shape.with_batch(n),
               [m, base](int64_t first, int64_t count, void* out) {
                 std::vector<double> v;
                 for (int64_t r = 0; r < count; ++r) {
                   m->sample(base + first + r, v);
                   for (int64_t j = 0; j < m->dim; ++j) {
                     const double x = v[static_cast<size_t>(j)];
                     if (m->u8)
                       static_cast<uint8_t*>(out)[r * m->dim + j] =
                           static_cast<uint8_t>(std::lround((x + U8_CENTRE / U8_STEP) * U8_STEP));
                     else
                       static_cast<float*>(out)[r * m->dim + j] = static_cast<float>(x);
                   }
                 }
               }};
}

Array y_array(const std::shared_ptr<const Model>& m, int64_t base, int64_t n) {
  if (m->targets == 0)
    return Array{DType::I32, Shape{n}, [m, base](int64_t first, int64_t count, void* out) {
                   for (int64_t r = 0; r < count; ++r)
                     static_cast<int32_t*>(out)[r] = m->label(base + first + r);
                 }};
  return Array{DType::F32, Shape{n, m->targets}, [m, base](int64_t first, int64_t count, void* out) {
                 std::vector<double> v;
                 for (int64_t r = 0; r < count; ++r) {
                   m->sample(base + first + r, v);
                   Rng noise(m->seed, TARGET_STREAM + static_cast<uint64_t>(base + first + r));
                   for (int64_t k = 0; k < m->targets; ++k) {
                     double dot = 0;
                     for (int64_t j = 0; j < m->dim; ++j)
                       dot += m->weights[k * m->dim + j] * v[static_cast<size_t>(j)];
                     static_cast<float*>(out)[r * m->targets + k] =
                         static_cast<float>(dot / std::sqrt(double(m->dim)) + m->noise * noise.normal());
                   }
                 }
               }};
}

}  // namespace

void synth(const SynthOptions& opt) {
  if (opt.samples < 1) throw UserError("synth: --samples must be at least 1");
  if (opt.shape.rank() < 1 || opt.shape.count() < 1)
    throw UserError("synth: --shape must have positive dimensions");
  if (opt.regression == 0 && opt.classes < 2) throw UserError("synth: --classes must be at least 2");
  if (opt.dtype != DType::U8 && opt.dtype != DType::F32)
    throw UserError("synth: --dtype must be uint8 or float32");
  DatasetWriter w(opt.out, opt.force);
  auto m = std::make_shared<Model>();
  m->dim = opt.shape.count();
  m->classes = opt.regression > 0 ? 0 : opt.classes;
  m->targets = opt.regression;
  m->noise = opt.noise >= 0 ? opt.noise : (opt.regression > 0 ? 0.1 : 1.0);
  m->u8 = opt.dtype == DType::U8;
  m->seed = opt.seed;
  for (int64_t c = 0; c < m->classes; ++c) {
    Rng r(opt.seed, PROTOTYPE_STREAM + static_cast<uint64_t>(c));
    for (int64_t j = 0; j < m->dim; ++j) m->prototypes.push_back(static_cast<float>(r.normal()));
  }
  Rng wr(opt.seed, WEIGHT_STREAM);
  for (int64_t j = 0; j < m->targets * m->dim; ++j) m->weights.push_back(static_cast<float>(wr.normal()));

  const int64_t n_val = opt.val >= 0 ? opt.val : opt.samples / 5;
  PackJob job;
  job.train = Split{x_array(m, 0, opt.samples, opt.shape), y_array(m, 0, opt.samples), "synth"};
  if (n_val > 0)
    job.val = Split{x_array(m, opt.samples, n_val, opt.shape), y_array(m, opt.samples, n_val), "synth"};
  job.num_classes = m->classes;
  job.scale = 1 / U8_STEP;
  job.mean = U8_CENTRE / U8_STEP;
  job.std = 1;
  write_packed(w, job);
}

}  // namespace hpc::data_tools
