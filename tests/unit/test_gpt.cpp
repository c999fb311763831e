// GPT layer tests: float64 finite-difference gradients of LayerNorm,
// causal attention, a whole block (with and without recompute), the tied
// embedding/head pair and a small whole model through the sequence
// cross-entropy; the causal mask (no output depends on a later token);
// recompute on/off bitwise equal in float32; the presets and their errors.
//
// Tolerances are grad_check.h's (1e-6 relative in float64, where a correct
// gradient lands near 1e-9 and a wrong term near 1e-2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/ops.h"
#include "core/error.h"
#include "grad_check.h"
#include "lm_util.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/spec.h"

namespace hpc::nn {
namespace {

using test::as_f64;
using test::check_model;
using test::GRAD_TOL;
using test::GradientChecker;
using test::layer_args;
using test::next_tokens;
using test::random_tensor;
using test::tokens;
using test::write_npy;

TEST(GptGrad, LayerNorm) {
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("ln"), Shape{5, 8}, 3), GRAD_TOL);
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("ln", {}, {{"eps", 0.1}}), Shape{7}, 2),
            GRAD_TOL);
}

TEST(GptGrad, CausalAttention) {
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("attn", {2}), Shape{6, 8}, 2), GRAD_TOL);
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("attn", {1}), Shape{5, 4}, 1), GRAD_TOL);
}

TEST(GptGrad, Block) {
  for (double recompute : {0.0, 1.0})
    EXPECT_LT(GradientChecker(1e-5, GRAD_TOL)
                  .check(layer_args("block", {2}, {{"layers", 2}, {"recompute", recompute}}), Shape{6, 8}, 2),
              GRAD_TOL);
}

// Output t of attention must not change, bit for bit, when any token after t changes.
TEST(GptCausal, OutputIgnoresLaterTokens) {
  const int64_t t_len = 7, c = 8;
  test::BoundLayer b = test::bind_layer(layer_args("attn", {2}), Shape{t_len, c}, DType::F64, 5);
  const Tensor x = random_tensor(Shape{2, t_len, c}, DType::F64, 6);
  const Tensor y0 = b.output(2), y1 = b.output(2);
  b.layer->forward(x, y0, {});
  for (int64_t later = 1; later < t_len; ++later) {
    const Tensor x2 = random_tensor(x.shape(), DType::F64, 6);
    const Tensor noise = random_tensor(Shape{c}, DType::F64, 100 + uint64_t(later));
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < c; ++j)
        x2.data<double>()[(s * t_len + later) * c + j] += noise.data<double>()[j];
    b.layer->forward(x2, y1, {});
    for (int64_t s = 0; s < 2; ++s) {
      const double* a = y0.data<double>() + s * t_len * c;
      const double* z = y1.data<double>() + s * t_len * c;
      EXPECT_EQ(std::memcmp(a, z, sizeof(double) * size_t(later * c)), 0) << "token " << later;
      EXPECT_NE(a[later * c], z[later * c]) << "token " << later << " itself must matter";
    }
  }
}

// The softmax subtracts its row's true maximum (float32; vector lanes and
// tail): two keys scoring 1000 and the rest 0 give 1/2 each in every row
// that sees both. A maximum that missed both would sum two exps past
// float's range (vec_math.h clamps each at 2.2e38) into inf.
TEST(GptAttention, SoftmaxTakesTheRowMaximum) {
  const int64_t t_len = 37, d = 8;  // rows of 37: four 8-lane vectors and a tail of 5
  const float a = std::sqrt(1000.0f * std::sqrt(float(d)));
  for (const auto& [first, last] : {std::pair<int64_t, int64_t>{13, 20}, {33, 36}}) {  // lanes 5, 4; the tail
    Tensor qkv(Shape{1, t_len, 3 * d}, DType::F32), probs(Shape{1, 1, t_len, t_len}, DType::F32),
        out(Shape{1, t_len, d}, DType::F32);
    backend::fill(qkv, 0);
    for (int64_t t = 0; t < t_len; ++t) qkv.data<float>()[t * 3 * d] = a;            // q_t = (a, 0, …)
    for (const int64_t top : {first, last}) qkv.data<float>()[top * 3 * d + d] = a;  // k_top = (a, 0, …)
    backend::attention_forward(qkv, 1, 1, probs, out);
    for (int64_t t = last; t < t_len; ++t)
      for (const int64_t top : {first, last})
        EXPECT_NEAR(probs.data<float>()[t * t_len + top], 0.5f, 1e-6) << "key " << top << ", row " << t;
  }
}

// The same through a whole model: logits at position t do not depend on token ids after t.
TEST(GptCausal, ModelLogitsIgnoreLaterTokens) {
  Model m("embed(11,8,6) block(2,layers=1) ln lm_head(11)", Shape{6}, DType::F64, 3);
  Tensor ids = tokens(1, 6, 11, DType::F64, 4);
  const Tensor y0(m.output_shape().with_batch(1), DType::F64);
  backend::copy(m.forward(ids, {}), y0);
  ids.data<double>()[4] = std::fmod(ids.data<double>()[4] + 5, 11);
  const Tensor& y1 = m.forward(ids, {});
  EXPECT_EQ(std::memcmp(y0.raw(), y1.raw(), sizeof(double) * 4 * 11), 0);
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the point
  EXPECT_NE(std::memcmp(y0.data<double>() + 4 * 11, y1.data<double>() + 4 * 11, sizeof(double) * 11), 0);
}

TEST(GptGrad, EmbeddingWithTiedHead) {
  // The token matrix is used twice (lookup and output projection): both gradients must add up.
  Model m("embed(11,8,6) lm_head(11)", Shape{6}, DType::F64, 1);
  EXPECT_EQ(m.num_params(), 11 * 8 + 6 * 8);  // the head stores nothing of its own
  EXPECT_EQ(m.param_info().size(), 2u);
  EXPECT_LT(check_model("embed(11,8,6) lm_head(11)", 6, 11, 3), GRAD_TOL);
  EXPECT_LT(check_model("embed(11,8,6) ln lm_head(11)", 6, 11, 2), GRAD_TOL);
}

TEST(GptGrad, WholeTinyModel) {
  EXPECT_LT(
      check_model("embed(13,8,5) block(2,layers=2) block(2,layers=2,recompute=1) ln lm_head(13)", 5, 13, 2),
      GRAD_TOL);
}

// Recompute changes when activations exist, not what is computed: float32
// loss and gradients are bitwise equal, and the activation memory shrinks.
TEST(GptRecompute, BitwiseEqualGradients) {
  PresetOptions cfg;
  cfg.preset = "gpt-tiny";
  cfg.context = 32;
  std::vector<Tensor> grads;
  std::vector<double> losses;
  std::vector<ActivationBytes> mem;
  for (bool recompute : {false, true}) {
    cfg.recompute = recompute;
    Model m(preset_spec(cfg, 256), Shape{32}, DType::F32, 7);
    const Tensor ids = tokens(3, 32, 256, DType::F32, 8);
    const Tensor ids64 = tokens(3, 32, 256, DType::F64, 8);
    const Tensor targets = next_tokens(ids64, 256);
    const Tensor dlogits(m.output_shape().with_batch(3), DType::F32);
    m.zero_grads();
    for (int micro = 0; micro < 2; ++micro) {  // twice: scratch reuse and accumulation
      const LossStats s = make_cross_entropy(0)->forward_backward(m.forward(ids, {}), targets, 3, 3, dlogits);
      m.backward(dlogits, {});
      if (micro == 0) losses.push_back(s.loss_sum);
    }
    grads.push_back(Tensor(Shape{m.num_params()}, DType::F32));
    backend::copy(m.grads(), grads.back());
    mem.push_back(m.activation_bytes(3));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(std::memcmp(grads[0].raw(), grads[1].raw(), grads[0].num_bytes()), 0);
  EXPECT_GT(backend::sum_squares(grads[0]), 0.0);
  EXPECT_EQ(mem[0].kept, mem[0].without_recompute);
  EXPECT_EQ(mem[1].without_recompute, mem[0].kept);
  EXPECT_EQ(mem[1].with_recompute, mem[1].kept);
  EXPECT_EQ(mem[0].with_recompute, mem[1].kept);  // what recompute would save is known either way
  EXPECT_LT(mem[1].kept, mem[0].kept);
}

TEST(GptPresets, ShapesAndParameterCounts) {
  PresetOptions cfg;
  cfg.preset = "gpt-tiny";
  const std::string tiny = preset_spec(cfg, 256);
  EXPECT_EQ(tiny, "embed(256,64,64) block(2,layers=2) block(2,layers=2) ln lm_head(256)");
  Model m(tiny, Shape{64}, DType::F32, 1);
  // wte + wpe + 2 blocks × (12·C² + 13·C) + final ln (2C); the head is tied.
  const int64_t c = 64;
  EXPECT_EQ(m.num_params(), 256 * c + 64 * c + 2 * (12 * c * c + 13 * c) + 2 * c);
  EXPECT_EQ(m.output_shape(), (Shape{64, 256}));
  cfg.preset = "gpt-small";
  cfg.recompute = true;
  EXPECT_NE(preset_spec(cfg, 256).find("block(4,layers=4,recompute=1)"), std::string::npos);
  cfg.preset = "gpt2-124m";
  cfg.recompute = false;
  EXPECT_EQ(preset_spec(cfg, 256).substr(0, 22), "embed(50257,768,1024) ");
}

TEST(GptPresets, Init) {
  Model m("embed(64,32,16) block(2,layers=8) ln lm_head(64)", Shape{16}, DType::F64, 9);
  auto stddev = [&](const std::string& name) {
    for (const ParamInfo& p : m.param_info())
      if (p.name == name) {
        const Tensor t = m.params().slice(p.offset, p.shape);
        return std::sqrt(backend::sum_squares(t) / double(t.count()));
      }
    ADD_FAILURE() << "no parameter " << name;
    return 0.0;
  };
  // N(0, 0.02²) and residual projections N(0, 0.02²/(2·8)); 1024+ samples each, so ±10% is > 3 sigma.
  EXPECT_NEAR(stddev("0.embed.token"), 0.02, 0.002);
  EXPECT_NEAR(stddev("1.block.attn.qkv.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("1.block.attn.proj.weight"), 0.005, 0.0005);
  EXPECT_NEAR(stddev("1.block.mlp.proj.weight"), 0.005, 0.0005);
  EXPECT_EQ(stddev("1.block.ln1.gamma"), 1.0);
  for (const ParamInfo& p : m.param_info()) {
    const bool matrix = p.name.find("weight") != std::string::npos;
    EXPECT_EQ(p.weight_decay, matrix) << p.name;  // decay only on the linear maps
  }
}

TEST(GptPresets, Errors) {
  PresetOptions cfg;
  cfg.preset = "gpt-tiny";
  cfg.vocab = 100;
  EXPECT_THROW(preset_spec(cfg, 256), UserError);  // 256 byte tokens do not fit in 100
  cfg.vocab = 0;
  cfg.heads = 3;
  EXPECT_THROW(preset_spec(cfg, 256), UserError);  // 64 not a multiple of 3
  cfg.preset = "cnn";
  cfg.heads = 0;
  cfg.layers = 4;
  EXPECT_THROW(preset_spec(cfg, 10), UserError);  // gpt options on a cnn
  cfg.layers = 0;
  EXPECT_NO_THROW(preset_spec(cfg, 10));
  try {
    Model m("embed(256,64,64) block(2) ln lm_head(256)", Shape{128}, DType::F32, 1);
    ADD_FAILURE() << "context mismatch accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("64 token ids"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Model("ln lm_head(10)", Shape{4, 8}, DType::F32, 1), UserError);          // nothing to tie to
  EXPECT_THROW(Model("embed(10,8,4) lm_head(12)", Shape{4}, DType::F32, 1), UserError);  // shapes differ
}

TEST(GptData, TokenOutsideVocabulary) {
  Model m("embed(10,8,4) lm_head(10)", Shape{4}, DType::F32, 1);
  Tensor ids = tokens(2, 4, 10, DType::F32, 1);
  ids.data<float>()[5] = 10;
  EXPECT_THROW(m.forward(ids, {}), UserError);
  ids.data<float>()[5] = 2.5f;
  EXPECT_THROW(m.forward(ids, {}), UserError);
}

// The sequence loss is the classification loss over N·T rows, scaled by 1/T,
// with padding samples (all their tokens) masked.
TEST(GptLoss, SequenceIsPerTokenClassification) {
  const int64_t n = 3, t = 4, v = 6;
  const Tensor logits = random_tensor(Shape{n, t, v}, DType::F64, 2, -2, 2);
  Tensor targets(Shape{n, t}, DType::I32);
  for (int64_t i = 0; i < n * t; ++i) targets.data<int32_t>()[i] = int32_t((i * 5) % v);
  auto ce = make_cross_entropy(0);
  const Tensor g_seq(logits.shape(), DType::F64), g_rows(Shape{n * t, v}, DType::F64);
  const LossStats seq = ce->forward_backward(logits, targets, 2, 2.0, g_seq);
  const LossStats rows = ce->forward_backward(logits.view(Shape{n * t, v}), targets.view(Shape{n * t}), 2 * t,
                                              2.0 * double(t), g_rows);
  EXPECT_EQ(seq.count, 2 * t);
  EXPECT_EQ(seq.loss_sum, rows.loss_sum);
  EXPECT_EQ(seq.correct1, rows.correct1);
  EXPECT_EQ(std::memcmp(g_seq.raw(), g_rows.raw(), g_seq.num_bytes()), 0);
  for (int64_t i = 2 * t * v; i < n * t * v; ++i) ASSERT_EQ(g_seq.data<double>()[i], 0.0);
}

// Run by tests/e2e/gpt_vs_torch.sh with HPCTRAIN_GPT_EXPORT=DIR: gpt-tiny
// (with its parameters perturbed so biases and LayerNorm are not at their
// trivial values) on one batch, in float32 and in float64 from the same
// float32 weights; writes weights, batch, losses and gradients as .npy and
// the parameter table as params.txt (name offset dims…).
TEST(GptExport, DISABLED_TorchExport) {
  const char* dir = std::getenv("HPCTRAIN_GPT_EXPORT");
  ASSERT_NE(dir, nullptr) << "set HPCTRAIN_GPT_EXPORT to an output directory";
  const std::string out(dir);
  PresetOptions cfg;
  cfg.preset = "gpt-tiny";
  const std::string spec = preset_spec(cfg, 256);
  const int64_t batch = 4, t_len = 64, vocab = 256;
  const Tensor ids64 = tokens(batch, t_len, vocab, DType::F64, 21);
  const Tensor targets = next_tokens(ids64, vocab);
  Tensor weights;
  for (DType dtype : {DType::F32, DType::F64}) {
    Model m(spec, Shape{t_len}, dtype, 5);
    if (dtype == DType::F32) {
      const Tensor noise = random_tensor(Shape{m.num_params()}, DType::F32, 6, -0.05, 0.05);
      backend::axpy(1.0, noise, m.params());
      weights = as_f64(m.params());
      std::FILE* f = std::fopen((out + "/params.txt").c_str(), "w");
      ASSERT_NE(f, nullptr);
      for (const ParamInfo& p : m.param_info()) {
        std::fprintf(f, "%s %lld", p.name.c_str(), static_cast<long long>(p.offset));
        for (int64_t d : p.shape.dims()) std::fprintf(f, " %lld", static_cast<long long>(d));
        std::fprintf(f, "\n");
      }
      std::fclose(f);
    } else {
      backend::copy(weights, m.params());  // the float32 weights, exactly
    }
    const Tensor ids(ids64.shape(), dtype);
    backend::convert(ids64, ids);
    const Tensor dlogits(m.output_shape().with_batch(batch), dtype);
    m.zero_grads();
    const LossStats s =
        make_cross_entropy(0)->forward_backward(m.forward(ids, {}), targets, batch, double(batch), dlogits);
    m.backward(dlogits, {});
    const std::string tag = dtype == DType::F32 ? "f32" : "f64";
    Tensor loss(Shape{1}, DType::F64);
    loss.data<double>()[0] = s.loss_sum / double(s.count);  // mean over the batch's tokens
    write_npy(out + "/loss_" + tag + ".npy", loss);
    write_npy(out + "/grads_" + tag + ".npy", as_f64(m.grads()));
  }
  write_npy(out + "/weights.npy", weights);
  Tensor ids_i32(ids64.shape(), DType::I32);
  for (int64_t i = 0; i < ids64.count(); ++i) ids_i32.data<int32_t>()[i] = int32_t(ids64.data<double>()[i]);
  write_npy(out + "/ids.npy", ids_i32);
  write_npy(out + "/targets.npy", targets);
}

}  // namespace
}  // namespace hpc::nn
