// Optimizers, clipping and learning-rate schedules.
//
// Expected values are computed here in double, written out independently of
// kernels/optim_math.h (closed forms where the arithmetic allows, otherwise a
// step-by-step loop of the textbook formulas). Every optimizer test runs in
// float32 and float64. Tolerances: float64 results differ from the double
// reference only by rounding order (~10 operations per step, 3 steps, each
// ≤ 1 ulp = 1.1e-16 relative), so 1e-13 is loose yet far below any formula
// error; float32 rounds hyper-parameters and every operation to 6e-8
// relative, so 2e-6 (absolute and relative, values are O(1)) covers three steps.
//
// DISABLED_TorchDriver at the end is not a test: tests/e2e/optim_vs_torch.sh
// runs it to drive our optimizer from a text file and compare with torch.optim.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numbers>
#include <type_traits>

#include "backend/ops.h"
#include "core/error.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace hpc::optim {
namespace {

using Values = std::vector<double>;

template <typename T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::F32 : DType::F64;
}

template <typename T>
double tolerance(double ref) {
  const double t = std::is_same_v<T, float> ? 2e-6 : 1e-13;
  return t + t * std::fabs(ref);
}

template <typename T>
Tensor tensor_of(const Values& v) {
  Tensor t(Shape{static_cast<int64_t>(v.size())}, dtype_of<T>());
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = static_cast<T>(v[i]);
  return t;
}

template <typename T>
Values values_of(const Tensor& t) {
  Values v(static_cast<size_t>(t.count()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(t.data<T>()[i]);
  return v;
}

template <typename T>
void expect_near_values(const Tensor& t, const Values& ref, const std::string& what) {
  const Values got = values_of<T>(t);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], tolerance<T>(ref[i])) << what << " element " << i;
}

OptimConfig config(const std::string& name, double weight_decay = 0) {
  OptimConfig c;
  c.name = enum_named<OptimizerKind>(name);  // UserError for a name that is no optimizer
  c.weight_decay = weight_decay;
  return c;
}

// Inputs exactly representable in float, so both dtypes start from the same numbers.
const Values P0 = {0.5, -1.25, 2.0, 0.75};
const std::vector<Values> GRADS = {
    {0.125, -0.5, 0.25, 1.0}, {-0.25, 0.375, 0.5, -0.0625}, {0.5, 0.25, -0.75, 0.125}};
const std::vector<DecayRange> ALL = {{0, 4}};

template <typename T>
class OptimTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(OptimTyped, FloatTypes);

TYPED_TEST(OptimTyped, SgdMomentumConstantGradientClosedForm) {
  using T = TypeParam;
  const double lr = 0.1, mu = 0.9, g = 0.5;
  for (bool nesterov : {false, true}) {
    OptimConfig c = config("sgd");
    c.momentum = mu;
    c.nesterov = nesterov;
    Tensor p = tensor_of<T>({1.0}), grad = tensor_of<T>({g});
    auto opt = Optimizer::create(c, p, {});
    for (int s = 0; s < 3; ++s) opt->step(p, grad, lr);
    // buf_k = g·(1 + μ + … + μ^(k−1)); plain steps by buf_k, Nesterov by g + μ·buf_k.
    const double total = nesterov ? 3 + 3 * mu + 2 * mu * mu + mu * mu * mu : 3 + 2 * mu + mu * mu;
    expect_near_values<T>(p, {1.0 - lr * g * total}, nesterov ? "nesterov" : "momentum");
    EXPECT_EQ(opt->steps_taken(), 3);
  }
}

TYPED_TEST(OptimTyped, SgdWithL2MatchesHandArithmeticEachStep) {
  using T = TypeParam;
  const double lr = 0.05, mu = 0.8, wd = 0.01;
  for (bool nesterov : {false, true}) {
    OptimConfig c = config("sgd", wd);
    c.momentum = mu;
    c.nesterov = nesterov;
    Tensor p = tensor_of<T>(P0);
    auto opt = Optimizer::create(c, p, ALL);
    Values ref = P0, buf(4, 0.0);
    for (const Values& g : GRADS) {
      opt->step(p, tensor_of<T>(g), lr);
      for (size_t i = 0; i < 4; ++i) {
        const double gd = g[i] + wd * ref[i];
        buf[i] = mu * buf[i] + gd;
        ref[i] -= lr * (nesterov ? gd + mu * buf[i] : buf[i]);
      }
      expect_near_values<T>(p, ref, nesterov ? "nesterov" : "momentum");
    }
    ASSERT_EQ(opt->state().size(), 1u);
    EXPECT_EQ(opt->state()[0].first, "momentum");
    expect_near_values<T>(opt->state()[0].second, buf, "momentum buffer");
  }
}

TYPED_TEST(OptimTyped, PlainSgdKeepsNoState) {
  using T = TypeParam;
  OptimConfig c = config("sgd", 0.1);
  c.momentum = 0;
  Tensor p = tensor_of<T>(P0);
  auto opt = Optimizer::create(c, p, ALL);
  EXPECT_TRUE(opt->state().empty());
  opt->step(p, tensor_of<T>(GRADS[0]), 0.5);
  Values ref = P0;
  for (size_t i = 0; i < 4; ++i) ref[i] -= 0.5 * (GRADS[0][i] + 0.1 * P0[i]);
  expect_near_values<T>(p, ref, "sgd");
}

// With a constant gradient the bias-corrected moments are exactly g and g², so
// every one of the first steps moves each parameter by lr·g/(|g| + eps) ≈ lr,
// whatever the gradient's scale. Without bias correction step 1 would be ~0.3·lr.
TYPED_TEST(OptimTyped, AdamBiasCorrectionGivesFullFirstSteps) {
  using T = TypeParam;
  const double lr = 0.01, eps = 1e-8;
  const Values g = {1e-3, 10.0, -0.5, 2.0};
  for (const char* name : {"adam", "adamw"}) {
    Tensor p = tensor_of<T>(P0), grad = tensor_of<T>(g);
    auto opt = Optimizer::create(config(name), p, ALL);
    for (int k = 1; k <= 3; ++k) {
      opt->step(p, grad, lr);
      Values ref = P0;
      for (size_t i = 0; i < 4; ++i) ref[i] -= k * lr * g[i] / (std::fabs(g[i]) + eps);
      expect_near_values<T>(p, ref, name);
    }
  }
}

// Adam(W) reference, written out from Kingma & Ba Algorithm 1 with PyTorch's eps placement.
struct AdamReference {
  Values p, m, v;
  int t = 0;
  void step(const Values& g, double lr, double b1, double b2, double eps, double wd, bool decoupled) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double gi = g[i];
      if (decoupled)
        p[i] -= lr * wd * p[i];
      else
        gi += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

TYPED_TEST(OptimTyped, AdamAndAdamWMatchHandArithmeticEachStep) {
  using T = TypeParam;
  const double lr = 0.02, wd = 0.1;
  for (const char* name : {"adam", "adamw"}) {
    OptimConfig c = config(name, wd);
    c.beta1 = 0.8;
    c.beta2 = 0.95;
    c.eps = 1e-6;
    Tensor p = tensor_of<T>(P0);
    auto opt = Optimizer::create(c, p, ALL);
    AdamReference ref{P0, Values(4, 0.0), Values(4, 0.0)};
    for (const Values& g : GRADS) {
      opt->step(p, tensor_of<T>(g), lr);
      ref.step(g, lr, c.beta1, c.beta2, c.eps, wd, std::string(name) == "adamw");
      expect_near_values<T>(p, ref.p, name);
    }
    const auto st = opt->state();
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0].first, "exp_avg");
    EXPECT_EQ(st[1].first, "exp_avg_sq");
    expect_near_values<T>(st[0].second, ref.m, "exp_avg");
    expect_near_values<T>(st[1].second, ref.v, "exp_avg_sq");
  }
}

// With a zero gradient, AdamW only shrinks p by (1 − lr·wd); Adam's L2 term
// becomes the gradient and is normalised by Adam, so p moves by ≈ lr.
TYPED_TEST(OptimTyped, AdamWDecayIsDecoupledAdamL2IsNormalised) {
  using T = TypeParam;
  const double lr = 0.01, wd = 0.1, eps = 1e-8;
  const Values zero(4, 0.0);
  Tensor pw = tensor_of<T>(P0), pa = tensor_of<T>(P0);
  Optimizer::create(config("adamw", wd), pw, ALL)->step(pw, tensor_of<T>(zero), lr);
  Optimizer::create(config("adam", wd), pa, ALL)->step(pa, tensor_of<T>(zero), lr);
  Values ref_w = P0, ref_a = P0;
  for (size_t i = 0; i < 4; ++i) {
    ref_w[i] = P0[i] * (1 - lr * wd);
    const double g = wd * P0[i];
    ref_a[i] = P0[i] - lr * g / (std::fabs(g) + eps);
  }
  expect_near_values<T>(pw, ref_w, "adamw");
  expect_near_values<T>(pa, ref_a, "adam");
}

// A run with weight decay must equal a run without it, bit for bit, outside
// the decay ranges, and differ inside them.
TYPED_TEST(OptimTyped, WeightDecayOnlyInsideDecayRanges) {
  using T = TypeParam;
  const std::vector<DecayRange> ranges = {{5, 2}, {1, 2}};  // unsorted on purpose
  const std::vector<bool> decayed = {false, true, true, false, false, true, true, false};
  Values p0(8), g(8);
  for (size_t i = 0; i < 8; ++i) {
    p0[i] = 0.25 * static_cast<double>(i) - 1.125;
    g[i] = 0.0625 * static_cast<double>(i % 3) - 0.0625;
  }
  for (const char* name : {"sgd", "adam", "adamw"}) {
    Tensor with = tensor_of<T>(p0), without = tensor_of<T>(p0), grad = tensor_of<T>(g);
    auto a = Optimizer::create(config(name, 0.05), with, ranges);
    auto b = Optimizer::create(config(name, 0.0), without, ranges);
    for (int s = 0; s < 3; ++s) {
      a->step(with, grad, 0.1);
      b->step(without, grad, 0.1);
    }
    for (size_t i = 0; i < 8; ++i) {
      const T x = with.data<T>()[i], y = without.data<T>()[i];
      if (decayed[i])
        EXPECT_NE(x, y) << name << " element " << i << " should be decayed";
      else
        // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the point
        EXPECT_EQ(std::memcmp(&x, &y, sizeof(T)), 0) << name << " element " << i << " must not be decayed";
    }
  }
}

// Copy the state of a running optimizer into a fresh one; both must then
// produce bit-identical parameters. The fresh optimizer without the copied
// state must not (otherwise this test could not fail).
TYPED_TEST(OptimTyped, StateRoundTripIsBitExact) {
  using T = TypeParam;
  for (const char* name : {"sgd", "adam", "adamw"}) {
    OptimConfig c = config(name, 0.01);
    c.nesterov = true;
    Tensor pa = tensor_of<T>(P0);
    auto a = Optimizer::create(c, pa, ALL);
    a->step(pa, tensor_of<T>(GRADS[0]), 0.1);
    a->step(pa, tensor_of<T>(GRADS[1]), 0.1);

    Tensor pb = tensor_of<T>(values_of<T>(pa)), pc = tensor_of<T>(values_of<T>(pa));
    auto b = Optimizer::create(c, pb, ALL);
    auto fresh = Optimizer::create(c, pc, ALL);
    const auto src = a->state(), dst = b->state();
    ASSERT_EQ(src.size(), dst.size());
    for (size_t k = 0; k < src.size(); ++k) {
      EXPECT_EQ(src[k].first, dst[k].first);
      backend::copy(src[k].second, dst[k].second);
    }
    b->set_steps_taken(a->steps_taken());

    for (int s = 0; s < 2; ++s) {
      a->step(pa, tensor_of<T>(GRADS[2]), 0.05);
      b->step(pb, tensor_of<T>(GRADS[2]), 0.05);
      fresh->step(pc, tensor_of<T>(GRADS[2]), 0.05);
    }
    EXPECT_EQ(std::memcmp(pa.raw(), pb.raw(), pa.num_bytes()), 0) << name;
    EXPECT_NE(std::memcmp(pa.raw(), pc.raw(), pa.num_bytes()), 0) << name;
    EXPECT_EQ(b->steps_taken(), 4);
  }
}

TYPED_TEST(OptimTyped, ClipGradNorm) {
  using T = TypeParam;
  Tensor g = tensor_of<T>({3.0, 0.0, -4.0});
  EXPECT_NEAR(clip_grad_norm(g, 10.0), 5.0, tolerance<T>(5.0));
  expect_near_values<T>(g, {3.0, 0.0, -4.0}, "below threshold");
  EXPECT_NEAR(clip_grad_norm(g, 0.0), 5.0, tolerance<T>(5.0));
  expect_near_values<T>(g, {3.0, 0.0, -4.0}, "clipping off");

  EXPECT_NEAR(clip_grad_norm(g, 1.0), 5.0, tolerance<T>(5.0));
  const double k = 1.0 / (5.0 + 1e-6);
  expect_near_values<T>(g, {3.0 * k, 0.0, -4.0 * k}, "clipped");
  EXPECT_NEAR(clip_grad_norm(g, 0.0), 1.0, 1e-6 + tolerance<T>(1.0));

  Tensor bad = tensor_of<T>({1.0, INFINITY});
  EXPECT_TRUE(std::isinf(clip_grad_norm(bad, 1.0)));
  EXPECT_EQ(bad.data<T>()[0], T(1));  // left for the caller to handle
}

TEST(Optimizer, ConfigErrorsAreUserErrors) {
  Tensor p(Shape{4}, DType::F32);
  EXPECT_THROW(Optimizer::create(config("lamb"), p, {}), UserError);
  OptimConfig c = config("sgd");
  c.momentum = 0;
  c.nesterov = true;
  EXPECT_THROW(Optimizer::create(c, p, {}), UserError);
  c = config("adam");
  c.beta2 = 1.0;
  EXPECT_THROW(Optimizer::create(c, p, {}), UserError);
  EXPECT_THROW(Optimizer::create(config("adamw", -1), p, {}), UserError);
  auto opt = Optimizer::create(config("adam"), p, {});
  EXPECT_THROW(opt->set_steps_taken(-1), UserError);
}

TEST(Optimizer, OverlappingDecayRangesAreABug) {
  Tensor p(Shape{10}, DType::F32);
  try {
    Optimizer::create(config("adamw", 0.1), p, {{0, 5}, {4, 2}});
    FAIL() << "overlap accepted";
  } catch (const UserError&) {
    FAIL() << "overlapping ranges come from code, not from the user";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), EXIT_INTERNAL);
  }
  EXPECT_THROW(Optimizer::create(config("adamw", 0.1), p, {{8, 3}}), Error);
}

TEST(Optimizer, DecayRangesOfModelParams) {
  std::vector<nn::ParamInfo> info(3);
  info[0] = {"0.linear.weight", 0, 0, Shape{4, 3}, true};
  info[1] = {"0.linear.bias", 0, 12, Shape{4}, false};
  info[2] = {"1.linear.weight", 1, 16, Shape{2, 4}, true};
  const auto r = decay_ranges_of(info);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].offset, 0);
  EXPECT_EQ(r[0].count, 12);
  EXPECT_EQ(r[1].offset, 16);
  EXPECT_EQ(r[1].count, 8);
}

// ---- schedules ---------------------------------------------------------------

OptimConfig schedule_config(const std::string& kind, int64_t warmup) {
  OptimConfig c;
  c.schedule = enum_named<ScheduleKind>(kind);  // UserError for a name that is no schedule
  c.warmup_steps = warmup;
  return c;
}

TEST(Schedule, ConstantWithWarmup) {
  LrSchedule s(schedule_config("constant", 4), 0.1, 100);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.025);  // first step is a quarter of the peak, not zero
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(1000), 0.1);
  LrSchedule none(schedule_config("constant", 0), 0.1, 100);
  EXPECT_DOUBLE_EQ(none.lr_at(0), 0.1);
}

TEST(Schedule, StepDecayCountsFromEndOfWarmup) {
  OptimConfig c = schedule_config("step", 2);
  c.step_every = 10;
  c.gamma = 0.5;
  LrSchedule s(c, 0.8, 100);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.4);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.8);
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.8);
  EXPECT_DOUBLE_EQ(s.lr_at(12), 0.4);
  EXPECT_DOUBLE_EQ(s.lr_at(32), 0.1);
}

TEST(Schedule, CosineEndpointsAndMidpoint) {
  OptimConfig c = schedule_config("cosine", 10);
  c.min_lr = 0.1;
  LrSchedule s(c, 1.0, 110);  // decays over steps 10 … 110
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-15);
  EXPECT_NEAR(s.lr_at(35), 0.1 + 0.9 * 0.5 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(s.lr_at(110), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(10000), 0.1);
  EXPECT_GT(s.lr_at(109), s.lr_at(110));
}

TEST(Schedule, BadSettingsAreUserErrors) {
  EXPECT_THROW(LrSchedule(schedule_config("linear", 0), 0.1, 10), UserError);
  EXPECT_THROW(LrSchedule(schedule_config("constant", -1), 0.1, 10), UserError);
  OptimConfig c = schedule_config("step", 0);
  c.step_every = 0;
  EXPECT_THROW(LrSchedule(c, 0.1, 10), UserError);
  c = schedule_config("cosine", 0);
  c.min_lr = 1.0;
  EXPECT_THROW(LrSchedule(c, 0.1, 10), UserError);
}

TEST(Schedule, LinearScaling) {
  OptimConfig c;
  c.lr = 0.1;
  c.base_batch = 256;
  c.lr_scaling = LrScaling::Linear;
  std::string why;
  EXPECT_DOUBLE_EQ(scaled_lr(c, 512, &why), 0.2);
  EXPECT_EQ(why, "linear scaling: lr 0.1 × 512/256 = 0.2");
  EXPECT_DOUBLE_EQ(scaled_lr(c, 64, nullptr), 0.025);
  c.lr_scaling = LrScaling::None;
  EXPECT_DOUBLE_EQ(scaled_lr(c, 512, &why), 0.1);
  EXPECT_NE(why.find("0.1"), std::string::npos);
  EXPECT_THROW(enum_named<LrScaling>("sqrt"), UserError);
  c.lr_scaling = LrScaling::Linear;
  c.base_batch = 0;
  EXPECT_THROW(scaled_lr(c, 512, &why), UserError);
}

// ---- driver for tests/e2e/optim_vs_torch.sh -----------------------------------
//
// Input (whitespace-separated): name dtype(f32|f64) momentum nesterov beta1 beta2
// eps weight_decay clip_norm n num_ranges num_steps; n parameters; num_ranges
// (offset count) pairs; then per step: lr and n gradients. Output: per step one
// line with the pre-clip gradient norm and the n parameters after the step.

template <typename T>
void drive(std::istream& in, std::ostream& out, const OptimConfig& c, double clip, int64_t n, int64_t nr,
           int64_t steps) {
  Values v(static_cast<size_t>(n));
  for (double& x : v) in >> x;
  Tensor p = tensor_of<T>(v);
  std::vector<DecayRange> ranges(static_cast<size_t>(nr));
  for (auto& r : ranges) in >> r.offset >> r.count;
  auto opt = Optimizer::create(c, p, ranges);
  out.precision(17);
  for (int64_t s = 0; s < steps; ++s) {
    double lr;
    in >> lr;
    for (double& x : v) in >> x;
    Tensor g = tensor_of<T>(v);
    out << clip_grad_norm(g, clip);
    opt->step(p, g, lr);
    for (double x : values_of<T>(p)) out << ' ' << x;
    out << '\n';
  }
}

TEST(Optimizer, DISABLED_TorchDriver) {
  const char* in_path = std::getenv("HPCTRAIN_TEST_OPTIM_DRIVER_IN");
  const char* out_path = std::getenv("HPCTRAIN_TEST_OPTIM_DRIVER_OUT");
  ASSERT_TRUE(in_path && out_path) << "set HPCTRAIN_TEST_OPTIM_DRIVER_IN and HPCTRAIN_TEST_OPTIM_DRIVER_OUT";
  std::ifstream in(in_path);
  std::ofstream out(out_path);
  ASSERT_TRUE(in && out);
  OptimConfig c;
  std::string name, dtype;
  double clip;
  int64_t n, nr, steps;
  in >> name >> dtype >> c.momentum >> c.nesterov >> c.beta1 >> c.beta2 >> c.eps >> c.weight_decay >> clip >>
      n >> nr >> steps;
  ASSERT_TRUE(in) << "malformed driver input";
  c.name = enum_named<OptimizerKind>(name);
  if (dtype == "f64")
    drive<double>(in, out, c, clip, n, nr, steps);
  else
    drive<float>(in, out, c, clip, n, nr, steps);
  ASSERT_TRUE(in) << "driver input ended early";
}

}  // namespace
}  // namespace hpc::optim
