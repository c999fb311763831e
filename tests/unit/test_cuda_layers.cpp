// Layers and whole models on the GPU.
//
//  - Gradient checks on the GPU, in float64: every layer's outputs and
//    gradients against the CPU's (which test_layers checks element by
//    element with finite differences), and a directional finite difference
//    on the GPU itself: (L(θ + h·v) − L(θ − h·v)) / 2h against ⟨∇L, v⟩ for a
//    random direction v over the input and all parameters at once, with
//    L = Σ r·y. With h = 1e-5 in double a right gradient agrees to ~1e-9,
//    a wrong one (a missing term, a transposed index) by 1e-2 or worse.
//  - A model trained for a few steps on the GPU follows the CPU run.
//  - bf16 and fp16 training (fp32 master weights) follows fp32, and an fp16
//    overflow skips the step without touching the parameters.
//
// Without a GPU: "SKIPPED: no GPU", exit 77 (--self-check-on-cpu runs the
// harness with the CPU standing in).
#include "backend/ops.h"
#include "config/config.h"
#include "device_compare.h"
#include "grad_check.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optimizer.h"
#include "train/mixed_precision.h"

namespace hpc::test {
namespace {

// ---- layers: the GPU against the CPU, and a directional finite difference ------------------

double dot64(const Tensor& a, const Tensor& b) {
  const Tensor ha = host64(a), hb = host64(b);
  double s = 0;
  for (int64_t i = 0; i < ha.count(); ++i) s += ha.data<double>()[i] * hb.data<double>()[i];
  return s;
}

// a + t·v on the host.
Tensor shifted(const Tensor& a, const Tensor& v, double t) {
  Tensor out(a.shape(), DType::F64);
  for (int64_t i = 0; i < a.count(); ++i)
    out.data<double>()[i] = a.data<double>()[i] + t * v.data<double>()[i];
  return out;
}

struct DeviceLayer {
  std::unique_ptr<nn::Layer> layer;
  Tensor params, grads;  // flat, on the DUT
};

DeviceLayer bind_on_dut(const nn::LayerArgs& args, const Shape& in, const Tensor& host_params) {
  DeviceLayer d;
  d.layer = nn::make_layer(args);
  d.layer->build(in, DType::F64);
  d.params = on_dut(host_params, DType::F64);
  d.grads = Tensor(host_params.shape(), DType::F64, dut());
  std::vector<Tensor> p, g;
  int64_t offset = 0;
  for (const nn::ParamSpec& s : d.layer->param_specs()) {
    p.push_back(d.params.slice(offset, s.shape));
    g.push_back(d.grads.slice(offset, s.shape));
    offset += s.shape.count();
  }
  d.layer->bind(p, g);
  return d;
}

void check_layer(const nn::LayerArgs& args, const Shape& in, int64_t batch) {
  SCOPED_TRACE(args.text);
  nn::RunCtx ctx;
  ctx.training = true;
  ctx.seed = 7;
  ctx.step = 3;
  ctx.layer = 1;
  BoundLayer cpu = bind_layer(args, in, DType::F64, 1);
  DeviceLayer gpu = bind_on_dut(args, in, cpu.params);
  const Tensor x = random64(in.with_batch(batch), 2);
  const Tensor r = random64(cpu.out_shape.with_batch(batch), 3);

  Tensor y = cpu.output(batch), dx = cpu.input_grad(batch);
  backend::fill(cpu.grads, 0);
  cpu.layer->forward(x, y, ctx);
  cpu.layer->backward(x, y, r, dx, ctx);

  const Tensor xd = on_dut(x, DType::F64), rd = on_dut(r, DType::F64);
  Tensor yd(y.shape(), DType::F64, dut()), dxd(dx.shape(), DType::F64, dut());
  gpu.layer->forward(xd, yd, ctx);
  gpu.layer->backward(xd, yd, rd, dxd, ctx);
  const Tol t{1e-12, 1e-9};
  expect_close(yd, y, t, "y");
  expect_close(dxd, dx, t, "dx");
  expect_close(gpu.grads, cpu.grads, t, "parameter gradients");

  // Directional finite difference, entirely on the DUT.
  const Tensor vx = random64(x.shape(), 4), vp = random64(cpu.params.shape(), 5);
  const double h = 1e-5;
  auto loss_at = [&](double s) {
    backend::copy(shifted(cpu.params, vp, s), gpu.params);
    const Tensor xs = on_dut(shifted(x, vx, s), DType::F64);
    gpu.layer->forward(xs, yd, ctx);
    return dot64(r, yd);
  };
  const double numeric = (loss_at(h) - loss_at(-h)) / (2 * h);
  const double analytic = dot64(vx, dxd) + (cpu.params.count() ? dot64(vp, gpu.grads) : 0.0);
  EXPECT_LE(std::abs(numeric - analytic), 1e-6 * std::max(1.0, std::abs(analytic)))
      << "directional derivative: finite difference " << numeric << ", backward " << analytic;
}

TEST(CudaLayers, GradientChecks) {
  check_layer(layer_args("linear", {7}), Shape{11}, 5);
  check_layer(layer_args("linear", {5}, {{"bias", 0}}), Shape{3, 4}, 4);
  check_layer(layer_args("conv", {4, 3}, {{"pad", 1}}), Shape{3, 8, 8}, 3);
  check_layer(layer_args("conv", {3, 3}, {{"stride", 2}, {"pad", 1}}), Shape{2, 9, 9}, 2);
  check_layer(layer_args("conv", {2, 1}, {{"stride", 2}, {"bias", 0}}), Shape{3, 6, 6}, 2);
  check_layer(layer_args("bn"), Shape{4, 5, 5}, 3);
  check_layer(layer_args("bn"), Shape{6}, 8);
  check_layer(layer_args("relu"), Shape{40}, 3);
  check_layer(layer_args("gelu"), Shape{40}, 3);
  check_layer(layer_args("tanh"), Shape{40}, 3);
  check_layer(layer_args("maxpool", {2}), Shape{2, 6, 6}, 2);
  check_layer(layer_args("maxpool", {3}, {{"stride", 2}}), Shape{2, 7, 7}, 2);
  check_layer(layer_args("avgpool", {2}), Shape{2, 6, 6}, 2);
  check_layer(layer_args("gap"), Shape{3, 5, 5}, 2);
  check_layer(layer_args("dropout", {0.3}), Shape{50}, 4);
  check_layer(layer_args("flatten"), Shape{2, 3, 3}, 2);
  check_layer(layer_args("res", {}, {},
                         {layer_args("conv", {4, 3}, {{"pad", 1}}), layer_args("bn"), layer_args("relu")}),
              Shape{4, 6, 6}, 2);
  check_layer(
      layer_args("res", {}, {}, {layer_args("conv", {6, 3}, {{"stride", 2}, {"pad", 1}}), layer_args("bn")}),
      Shape{3, 6, 6}, 2);
}

// ---- models: a few training steps, GPU against CPU ------------------------------------------

// The convolutions before BatchNorm have no bias: BatchNorm removes it, so its gradient is
// rounding noise, which Adam scales up to full-size steps that differ between CPU and GPU.
const char* SPEC =
    "conv(8,3,pad=1,bias=0) bn relu maxpool(2) res(conv(8,3,pad=1,bias=0) bn relu) flatten dropout(0.2) "
    "linear(10)";
const Shape INPUT{1, 8, 8};
constexpr int64_t BATCH = 16;

struct Batch {
  Tensor x, y;  // host: float32 images, int32 labels
};

Batch make_batch(uint64_t seed) {
  Batch b{Tensor(INPUT.with_batch(BATCH), DType::F32), Tensor(Shape{BATCH}, DType::I32)};
  backend::convert(random64(b.x.shape(), seed), b.x);
  for (int64_t i = 0; i < BATCH; ++i) b.y.data<int32_t>()[i] = static_cast<int32_t>((seed * 31 + i * 7) % 10);
  return b;
}

struct TrainingRun {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<train::MixedPrecision> precision;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<nn::Loss> loss = nn::make_cross_entropy(0.1);
  Tensor dlogits;
  Device device;

  TrainingRun(Device d, const std::string& precision_name) : device(d) {
    const Precision p = enum_named<Precision>(precision_name);
    model = std::make_unique<nn::Model>(SPEC, INPUT, train::MixedPrecision::model_dtype(p, d), 5, d);
    precision = std::make_unique<train::MixedPrecision>(p, d, model->params(), model->grads());
    OptimConfig cfg;
    cfg.name = OptimizerKind::AdamW;
    cfg.lr = 3e-3;
    cfg.weight_decay = 0.01;
    optimizer = optim::Optimizer::create(cfg, precision->optimizer_params(),
                                         optim::decay_ranges_of(model->param_info()));
    dlogits = Tensor(model->output_shape().with_batch(BATCH), precision->model_dtype(), d);
  }

  // One step; returns the mean loss, or NaN when the step was skipped.
  double step(const Batch& b, uint64_t step, double grad_boost = 1.0) {
    Tensor x = b.x, y = b.y;
    if (device != Device::CPU) {
      x = on_dut(host64(b.x), precision->model_dtype(), device);
      y = Tensor(b.y.shape(), DType::I32, device);
      backend::copy(b.y, y);
    }
    nn::RunCtx rc;
    rc.seed = 9;
    rc.step = step;
    model->zero_grads();
    const Tensor& logits = model->forward(x, rc);
    const nn::LossStats s =
        loss->forward_backward(logits, y, BATCH, BATCH / precision->loss_scale() / grad_boost, dlogits);
    model->backward(dlogits, rc);
    if (!precision->unscale()) return std::nan("");
    optimizer->step(precision->optimizer_params(), precision->optimizer_grads(), 3e-3);
    precision->publish();
    return s.loss_sum / BATCH;
  }
};

TEST(CudaModel, TrainsLikeTheCpu) {
  TrainingRun cpu(Device::CPU, "fp32"), gpu(dut(), "fp32");
  expect_close(gpu.model->params(), host64(cpu.model->params()), EXACT, "initial parameters");
  for (uint64_t s = 0; s < 6; ++s) {
    const Batch b = make_batch(100 + s);
    const double lc = cpu.step(b, s), lg = gpu.step(b, s);
    EXPECT_NEAR(lg, lc, 1e-4 * std::abs(lc)) << "step " << s;
  }
  expect_close(gpu.model->params(), host64(cpu.model->params()), {1e-5, 1e-3}, "parameters after 6 steps");
  auto gb = gpu.model->buffers(), cb = cpu.model->buffers();
  ASSERT_EQ(gb.size(), cb.size());
  for (size_t i = 0; i < gb.size(); ++i) {
    EXPECT_EQ(gb[i].second.device(), dut()) << gb[i].first << " follows the model onto the device";
    expect_close(gb[i].second, host64(cb[i].second), {1e-6, 1e-4}, gb[i].first);
  }
  // Evaluation (running statistics, no dropout) agrees as well.
  nn::RunCtx eval;
  eval.training = false;
  const Batch b = make_batch(999);
  const Tensor& lc = cpu.model->forward(b.x, eval);
  const Tensor host_logits = host64(lc);
  const Tensor& lg = gpu.model->forward(on_dut(host64(b.x), DType::F32), eval);
  expect_close(lg, host_logits, {1e-5, 1e-4}, "evaluation logits");
}

TEST(CudaModel, MixedPrecisionFollowsFp32) {
  if (self_check()) GTEST_SKIP() << "bf16 and fp16 need a GPU";
  std::vector<Batch> data;
  for (uint64_t s = 0; s < 4; ++s) data.push_back(make_batch(200 + s));
  auto train = [&](const std::string& precision) {
    TrainingRun run(Device::CUDA, precision);
    double last = 0;
    for (uint64_t s = 0; s < 40; ++s) {
      const double l = run.step(data[s % data.size()], s);
      if (!std::isnan(l)) last = l;
    }
    if (precision == "fp16") {
      EXPECT_LE(run.precision->skipped_steps(), 3) << "fp16 skipped steps";
      EXPECT_GT(run.precision->loss_scale(), 1.0);
    }
    return last;
  };
  const double fp32 = train("fp32"), bf16 = train("bf16"), fp16 = train("fp16");
  EXPECT_LT(fp32, 1.5);  // 64 samples memorised: the loss falls well below ln 10 = 2.3
  EXPECT_NEAR(bf16, fp32, 0.15 * fp32 + 0.05);
  EXPECT_NEAR(fp16, fp32, 0.1 * fp32 + 0.05);
}

TEST(CudaModel, Fp16OverflowSkipsTheStep) {
  if (self_check()) GTEST_SKIP() << "fp16 needs a GPU";
  TrainingRun run(Device::CUDA, "fp16");
  const Tensor before = host64(run.model->params());
  const double scale = run.precision->loss_scale();
  // A gradient 1e30 times too large overflows fp16: the step must be skipped and the scale halved.
  EXPECT_TRUE(std::isnan(run.step(make_batch(300), 0, 1e30)));
  EXPECT_EQ(run.precision->skipped_steps(), 1);
  EXPECT_EQ(run.precision->loss_scale(), scale / 2);
  expect_close(run.model->params(), before, EXACT, "parameters after a skipped step");
  EXPECT_FALSE(std::isnan(run.step(make_batch(301), 1)));  // and training goes on
}

}  // namespace
}  // namespace hpc::test

HPC_DEVICE_TEST_MAIN()
