// GradientChecker: the finite-difference test every layer goes through
// (Caffe's GradientChecker, in double precision).
//
// It builds a layer in float64, binds its parameters to its own flat
// buffers filled with random values, runs forward on a random input and
// takes L = Σ r·y for a fixed random projection r as the scalar loss, so
// backward gets dy = r. Then EVERY input and parameter element is nudged by
// ±h and the central difference (L(+h) − L(−h)) / 2h is compared with the
// analytic gradient.
//
// Tolerance: with h = 1e-5 in double, the truncation error is ~h²·|L'''| ≈
// 1e-10 and the rounding error ~1e-16·|L|/h ≈ 1e-10 for the |L| ~ 10 of
// these small shapes, so a correct gradient lands near 1e-9 and a wrong
// one (a missing term, a transposed index) at 1e-2 or worse. The error is
// relative to max(|analytic|, |numeric|, 0.1) so that near-zero gradients
// are held to an absolute 1e-7.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "nn/layer.h"
#include "nn/layers/layer_util.h"

namespace hpc::test {

// LayerArgs as the spec parser would produce them, with their spec text.
inline nn::LayerArgs layer_args(std::string name, std::vector<double> positional = {},
                                std::map<std::string, double> named = {},
                                std::vector<nn::LayerArgs> children = {}) {
  nn::LayerArgs a{std::move(name), std::move(positional), std::move(named), std::move(children), ""};
  a.text = nn::args_text(a);
  return a;
}

// Uniform in [lo, hi), reproducible from the seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor f64(shape, DType::F64);
  Rng rng(seed, 7);
  for (int64_t i = 0; i < f64.count(); ++i) f64.data<double>()[i] = lo + (hi - lo) * rng.uniform();
  if (dtype == DType::F64) return f64;
  Tensor t(shape, dtype);
  backend::convert(f64, t);
  return t;
}

// A built layer with its own flat parameter and gradient buffers.
struct BoundLayer {
  std::unique_ptr<nn::Layer> layer;
  Shape in_shape, out_shape;
  DType dtype = DType::F64;
  std::vector<nn::ParamSpec> specs;
  Tensor params, grads;  // flat; the views below point into them
  std::vector<Tensor> param_views, grad_views;

  Tensor output(int64_t batch) const { return Tensor(out_shape.with_batch(batch), dtype); }
  Tensor input_grad(int64_t batch) const { return Tensor(in_shape.with_batch(batch), dtype); }
};

// Builds `args` for in_shape and binds random parameters in [-1, 1) (or the values of `params`).
inline BoundLayer bind_layer(const nn::LayerArgs& args, const Shape& in_shape, DType dtype, uint64_t seed,
                             const Tensor& params = Tensor()) {
  BoundLayer b;
  b.layer = nn::make_layer(args);
  b.in_shape = in_shape;
  b.dtype = dtype;
  b.out_shape = b.layer->build(in_shape, dtype);
  b.specs = b.layer->param_specs();
  int64_t total = 0;
  for (const auto& s : b.specs) total += s.shape.count();
  b.params = random_tensor(Shape{total}, dtype, seed);
  if (params.defined()) backend::convert(params, b.params);
  b.grads = Tensor(Shape{total}, dtype);
  int64_t offset = 0;
  for (const auto& s : b.specs) {
    b.param_views.push_back(b.params.slice(offset, s.shape));
    b.grad_views.push_back(b.grads.slice(offset, s.shape));
    offset += s.shape.count();
  }
  b.layer->bind(b.param_views, b.grad_views);
  return b;
}

inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.count(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

class GradientChecker {
 public:
  explicit GradientChecker(double step = 1e-5, double tolerance = 1e-6)
      : step_(step), tolerance_(tolerance) {}

  // Checks dx and every parameter gradient of the layer built from `args`.
  // Returns the largest error seen (for reporting); failures are gtest failures.
  double check(const nn::LayerArgs& args, const Shape& in_shape, int64_t batch, const nn::RunCtx& ctx = {},
               uint64_t seed = 1) const {
    BoundLayer b = bind_layer(args, in_shape, DType::F64, seed);
    const Tensor x = random_tensor(in_shape.with_batch(batch), DType::F64, seed + 1);
    const Tensor y = b.output(batch);
    const Tensor r = random_tensor(y.shape(), DType::F64, seed + 2);
    auto loss = [&] {
      b.layer->forward(x, y, ctx);
      return dot(r, y);
    };

    loss();
    const Tensor dx = b.input_grad(batch);
    backend::fill(b.grads, 0);
    b.layer->backward(x, y, r, dx, ctx);

    double worst = compare(args.text + " dx", x, dx, loss);
    for (size_t p = 0; p < b.specs.size(); ++p)
      worst = std::max(worst,
                       compare(args.text + " d" + b.specs[p].name, b.param_views[p], b.grad_views[p], loss));
    return worst;
  }

 private:
  template <typename Loss>
  double compare(const std::string& what, const Tensor& value, const Tensor& analytic, Loss& loss) const {
    double worst = 0;
    int64_t worst_at = -1;
    double* v = value.data<double>();
    for (int64_t i = 0; i < value.count(); ++i) {
      const double saved = v[i];
      v[i] = saved + step_;
      const double up = loss();
      v[i] = saved - step_;
      const double down = loss();
      v[i] = saved;
      const double numeric = (up - down) / (2 * step_);
      const double a = analytic.data<double>()[i];
      const double err = std::abs(a - numeric) / std::max({std::abs(a), std::abs(numeric), 0.1});
      if (err > worst) {
        worst = err;
        worst_at = i;
      }
    }
    EXPECT_LT(worst, tolerance_) << what << ": worst relative error at element " << worst_at << " of "
                                 << value.count();
    return worst;
  }

  double step_, tolerance_;
};

}  // namespace hpc::test
