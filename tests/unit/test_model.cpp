// Model and spec: parsing, presets (parameter counts equal PyTorch's for the
// same architectures), the flat-buffer layout, and a finite-difference check
// of a whole model's backward in float64 — this checks the plumbing between
// layers (activation buffers, gradient accumulation, ready frontier).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/model.h"
#include "nn/spec.h"

using namespace hpc;

namespace {

void fill_random(const Tensor& t, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v(static_cast<size_t>(t.count()));
  for (double& x : v) x = 2 * rng.uniform() - 1;
  backend::convert(Tensor::borrow(v.data(), t.shape(), DType::F64), t);
}

// Scalar loss L = Σ w ⊙ model(x) with fixed random weights w.
double loss_of(nn::Model& m, const Tensor& x, const Tensor& w, const nn::RunCtx& rc) {
  const Tensor& y = m.forward(x, rc);
  double s = 0;
  for (int64_t i = 0; i < y.count(); ++i) s += y.data<double>()[i] * w.data<double>()[i];
  return s;
}

}  // namespace

TEST(Spec, ParsesPositionalNamedAndNested) {
  auto layers = nn::parse_spec("conv(32,3,pad=1)  bn relu res(conv(8,3,stride=2,pad=1) bn) linear(10)");
  ASSERT_EQ(layers.size(), 5u);
  EXPECT_EQ(layers[0].name, "conv");
  EXPECT_EQ(layers[0].positional, (std::vector<double>{32, 3}));
  EXPECT_EQ(layers[0].named.at("pad"), 1);
  EXPECT_EQ(layers[3].name, "res");
  ASSERT_EQ(layers[3].children.size(), 2u);
  EXPECT_EQ(layers[3].children[0].named.at("stride"), 2);
  EXPECT_EQ(layers[4].text, "linear(10)");
}

TEST(Spec, SyntaxErrorsAreUserErrorsWithAPosition) {
  for (const char* bad : {"", "conv(32", "conv(32,,3)", "linear(x)", "conv(pad=1,3)", "linear(1e999)",
                          "conv(3,pad=1,pad=2)", "(3)", "linear()"}) {
    try {
      nn::parse_spec(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("model spec"), std::string::npos) << e.what();
    }
  }
}

TEST(Spec, UnknownPresetListsKnownOnes) {
  try {
    nn::preset_spec("resnet21", {}, 10);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("resnet20"), std::string::npos);
  }
}

// Parameter counts of the same architectures in PyTorch (torch.nn, bias where ours has it).
TEST(Model, PresetParameterCountsMatchPyTorch) {
  struct Case {
    const char* preset;
    Shape in;
    int64_t params;
  };
  for (const Case& c : {Case{"simplenet", Shape{1, 28, 28}, 7850}, Case{"mlp", Shape{1, 28, 28}, 669706},
                        Case{"cnn", Shape{1, 28, 28}, 421834}, Case{"lenet5", Shape{1, 28, 28}, 61706},
                        Case{"resnet20", Shape{3, 32, 32}, 272474}}) {
    nn::Model m(nn::preset_spec(c.preset, {512, 512}, 10), c.in, DType::F32, 1);
    EXPECT_EQ(m.num_params(), c.params) << c.preset;
    EXPECT_EQ(m.output_shape(), Shape{10}) << c.preset;
  }
}

TEST(Model, FlatLayoutIsContiguousInLayerOrder) {
  nn::Model m("flatten linear(5) relu linear(3)", Shape{2, 2}, DType::F32, 1);
  const auto& info = m.param_info();
  ASSERT_EQ(info.size(), 4u);
  int64_t offset = 0;
  for (const auto& p : info) {
    EXPECT_EQ(p.offset, offset) << p.name;
    offset += p.shape.count();
  }
  EXPECT_EQ(offset, m.num_params());
  EXPECT_EQ(info[0].name, "1.linear.weight");
  EXPECT_TRUE(info[0].weight_decay);
  EXPECT_FALSE(info[1].weight_decay) << "biases are not decayed";
}

TEST(Model, SameSeedSameInitialisationOtherSeedOther) {
  nn::Model a("flatten linear(8) linear(3)", Shape{4}, DType::F32, 7),
      b("flatten linear(8) linear(3)", Shape{4}, DType::F32, 7);
  nn::Model c("flatten linear(8) linear(3)", Shape{4}, DType::F32, 8);
  EXPECT_EQ(0, std::memcmp(a.params().raw(), b.params().raw(), a.params().num_bytes()));
  EXPECT_NE(0, std::memcmp(a.params().raw(), c.params().raw(), a.params().num_bytes()));
}

TEST(Model, WholeModelGradientMatchesFiniteDifferences) {
  const char* spec =
      "conv(3,3,stride=2,pad=1) bn relu res(conv(3,3,pad=1) bn tanh) maxpool(2) flatten linear(4) gelu "
      "linear(3)";
  nn::Model m(spec, Shape{2, 8, 8}, DType::F64, 3);
  Tensor x(Shape{3, 2, 8, 8}, DType::F64), w(Shape{3, 3}, DType::F64);
  fill_random(x, 11);
  fill_random(w, 12);
  nn::RunCtx rc;
  m.zero_grads();
  loss_of(m, x, w, rc);
  std::vector<int64_t> frontiers;
  m.backward(w, rc, [&](int64_t f) { frontiers.push_back(f); });
  ASSERT_EQ(static_cast<int>(frontiers.size()), m.num_layers());
  for (size_t i = 1; i < frontiers.size(); ++i)
    EXPECT_LE(frontiers[i], frontiers[i - 1]) << "frontier moves down";
  EXPECT_EQ(frontiers.back(), 0);

  std::vector<double> analytic(m.grads().data<double>(), m.grads().data<double>() + m.num_params());
  double* p = m.params().data<double>();
  const double h = 1e-6;
  double worst = 0;
  for (int64_t i = 0; i < m.num_params(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    double up = loss_of(m, x, w, rc);
    p[i] = saved - h;
    double down = loss_of(m, x, w, rc);
    p[i] = saved;
    double numeric = (up - down) / (2 * h);
    double err = std::abs(numeric - analytic[static_cast<size_t>(i)]) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, err);
  }
  // Central differences in double: truncation O(h²) and rounding O(ε/h) ≈ 1e-10.
  // ReLU/maxpool kinks make rare points non-differentiable; the seed is fixed so none is hit.
  EXPECT_LT(worst, 1e-6);
}

TEST(Model, GradientsAccumulateAcrossBackwardCalls) {
  nn::Model m("flatten linear(4) relu linear(2)", Shape{3}, DType::F64, 1);
  Tensor x(Shape{5, 3}, DType::F64), w(Shape{5, 2}, DType::F64);
  fill_random(x, 1);
  fill_random(w, 2);
  nn::RunCtx rc;
  m.zero_grads();
  m.forward(x, rc);
  m.backward(w, rc);
  std::vector<double> once(m.grads().data<double>(), m.grads().data<double>() + m.num_params());
  m.forward(x, rc);
  m.backward(w, rc);
  for (int64_t i = 0; i < m.num_params(); ++i)
    EXPECT_DOUBLE_EQ(m.grads().data<double>()[i], 2 * once[static_cast<size_t>(i)]);
}

TEST(Model, SpecThatDoesNotFitTheInputNamesTheLayer) {
  try {
    nn::Model m("conv(8,3) flatten linear(10)", Shape{784}, DType::F32, 1);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("conv(8,3)"), std::string::npos) << e.what();
  }
}

TEST(Model, ForwardChecksTheInputShape) {
  nn::Model m("flatten linear(2)", Shape{3}, DType::F32, 1);
  Tensor wrong(Shape{4, 5}, DType::F32);
  EXPECT_THROW(m.forward(wrong, nn::RunCtx{}), UserError);
}
