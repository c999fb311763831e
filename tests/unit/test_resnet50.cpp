// The resnet50 preset (nn/spec.cpp): torchvision's resnet50 layout and
// parameter count (25,557,032 with 1000 classes), model.width and
// model.zero_init_residual, the torchvision state_dict names the exporter
// uses, and a finite-difference check of the whole network's backward in
// float64 at a reduced width (2: stages of 2, 4, 8, 16 → 64 channels) on
// 32x32 inputs — every layer kind of the preset (strided 7x7 stem, padded
// max pool, bottlenecks, projection shortcuts, gap) in one chain.
// (The forward against torchvision itself: tests/e2e/image_torchvision.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "train/torchvision_layout.h"

using namespace hpc;

namespace {

std::string resnet50(int64_t width, bool zero_init, int64_t classes) {
  nn::PresetOptions o;
  o.preset = "resnet50";
  o.width = width;
  o.zero_init_residual = zero_init;
  return nn::preset_spec(o, classes);
}

void fill_random(const Tensor& t, uint64_t seed) {
  Rng rng(seed);
  for (int64_t i = 0; i < t.count(); ++i) t.data<double>()[i] = 2 * rng.uniform() - 1;
}

double loss_of(nn::Model& m, const Tensor& x, const Tensor& w, const nn::RunCtx& rc) {
  const Tensor& y = m.forward(x, rc);
  double s = 0;
  for (int64_t i = 0; i < y.count(); ++i) s += y.data<double>()[i] * w.data<double>()[i];
  return s;
}

}  // namespace

TEST(ResNet50, TorchvisionLayoutAndParameterCount) {
  const std::string spec = resnet50(64, false, 1000);
  EXPECT_EQ(spec, nn::preset_spec("resnet50", {}, 1000));
  nn::Model m(spec, Shape{3, 64, 64}, DType::F32, 1);
  EXPECT_EQ(m.num_params(), 25557032) << "torchvision.models.resnet50().parameters()";
  EXPECT_EQ(m.output_shape(), Shape{1000});
  EXPECT_EQ(spec.rfind("conv(64,7,stride=2,pad=3,bias=0) bn relu maxpool(3,stride=2,pad=1) res(", 0), 0u);
  // 3 + 4 + 6 + 3 blocks, 4 of them with a projection (the first of each stage).
  int blocks = 0, projections = 0;
  for (const nn::ParamInfo& p : m.param_info()) {
    blocks += p.name.find(".res.body.0.weight") != std::string::npos;
    projections += p.name.find(".res.shortcut.0.weight") != std::string::npos;
  }
  EXPECT_EQ(blocks, 16);
  EXPECT_EQ(projections, 4);

  const std::map<std::string, std::string> tv = train::torchvision_resnet_names(m);
  ASSERT_EQ(tv.size(), m.param_info().size() + 2 * 53) << "every parameter and the 53 bns' two buffers";
  EXPECT_EQ(tv.at("0.conv.weight"), "conv1.weight");
  EXPECT_EQ(tv.at("1.bn.gamma"), "bn1.weight");
  EXPECT_EQ(tv.at("4.res.body.0.weight"), "layer1.0.conv1.weight");
  EXPECT_EQ(tv.at("4.res.body.7.beta"), "layer1.0.bn3.bias");
  EXPECT_EQ(tv.at("4.res.shortcut.0.weight"), "layer1.0.downsample.0.weight");
  EXPECT_EQ(tv.at("4.res.shortcut.1.running_var"), "layer1.0.downsample.1.running_var");
  EXPECT_EQ(tv.at("10.res.body.3.weight"), "layer2.0.conv2.weight");
  EXPECT_EQ(tv.at("34.res.body.4.gamma"), "layer4.2.bn2.weight");
  EXPECT_EQ(tv.at("37.linear.weight"), "fc.weight");
  std::set<std::string> distinct;
  for (const auto& [hp, name] : tv) distinct.insert(name);
  EXPECT_EQ(distinct.size(), tv.size());
  // Not a torchvision ResNet: no names.
  EXPECT_TRUE(train::torchvision_resnet_names(
                  nn::Model(nn::preset_spec("resnet20", {}, 10), Shape{3, 32, 32}, DType::F32, 1))
                  .empty());
}

TEST(ResNet50, WidthAndZeroInitResidual) {
  nn::Model m(resnet50(8, true, 5), Shape{3, 32, 32}, DType::F32, 1);
  EXPECT_EQ(m.output_shape(), Shape{5});
  int zeroed = 0;
  for (const nn::ParamInfo& p : m.param_info()) {
    if (p.name.find(".res.body.7.gamma") == std::string::npos) continue;
    ++zeroed;
    const float* g = m.params().data<float>() + p.offset;
    EXPECT_TRUE(std::all_of(g, g + p.shape.count(), [](float v) { return v == 0; })) << p.name;
  }
  EXPECT_EQ(zeroed, 16);
  nn::PresetOptions o;
  o.preset = "cnn";
  o.zero_init_residual = true;
  EXPECT_THROW(nn::preset_spec(o, 10), UserError);
  o.preset = "resnet20";
  EXPECT_NE(nn::preset_spec(o, 10).find("bn(gamma=0)) relu"), std::string::npos);
  o.width = 32;
  EXPECT_THROW(nn::preset_spec(o, 10), UserError) << "model.width is resnet50's, not resnet20's";
}

TEST(ResNet50, GradientMatchesFiniteDifferencesAtReducedWidth) {
  // 64x64 inputs and a batch of 4: the last stage's bns normalise 4 x 2 x 2 values (over 2 values a
  // bn's output is ±1 whatever its input, and finite differences meet a cliff, not a gradient).
  nn::Model m(resnet50(2, false, 3), Shape{3, 64, 64}, DType::F64, 5);
  Tensor x(Shape{4, 3, 64, 64}, DType::F64), w(Shape{4, 3}, DType::F64);
  fill_random(x, 21);
  fill_random(w, 22);
  nn::RunCtx rc;
  m.zero_grads();
  loss_of(m, x, w, rc);
  m.backward(w, rc, [](int64_t) {});
  const std::vector<double> analytic(m.grads().data<double>(), m.grads().data<double>() + m.num_params());
  double* p = m.params().data<double>();
  // h = 1e-7, not the 1e-6 of the small models: at width 2 some bn channels vary little, the loss
  // curves sharply there, and the O(h²) truncation of 1e-6 reached 1% on the stem's weights. At 1e-7
  // the worst error is ~3e-7 (rounding ε·|L|/h); a wrong gradient is off by 1e-2 or more.
  const double h = 1e-7;
  double worst = 0;
  int64_t checked = 0;
  // Up to 4 elements of every parameter tensor (161 of them): each layer's gradient, at a cost of seconds.
  for (const nn::ParamInfo& info : m.param_info()) {
    const int64_t n = info.shape.count(), step = std::max<int64_t>(1, n / 4);
    for (int64_t k = 0; k < n; k += step) {
      const int64_t i = info.offset + k;
      const double saved = p[i];
      p[i] = saved + h;
      const double up = loss_of(m, x, w, rc);
      p[i] = saved - h;
      const double down = loss_of(m, x, w, rc);
      p[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double err =
          std::abs(numeric - analytic[static_cast<size_t>(i)]) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, err);
      ++checked;
      EXPECT_LT(err, 1e-6) << info.name << "[" << k << "]: analytic " << analytic[static_cast<size_t>(i)]
                           << ", numeric " << numeric;
    }
  }
  EXPECT_GT(checked, 500);
  std::printf("resnet50 at width 2: %lld parameters, %lld checked, worst relative error %.2e\n",
              static_cast<long long>(m.num_params()), static_cast<long long>(checked), worst);
}
