// Llama tests: float64 finite-difference gradients of every new layer
// (RMSNorm, attention with grouped kv heads and rotary positions and its
// scalings, the SwiGLU MLP, the Llama block with and without recompute, the
// position-free embedding with an untied head, whole models); the CPU
// kernel tables against their generic loops bit for bit; rotary's inverse,
// its interleaved form, and position tables; incremental decoding against
// the full forward (Llama and GPT); the presets and their errors.
//
// LlamaExport.DISABLED_TorchExport is run by tests/e2e/llama_vs_torch.sh,
// which compares logits and gradients with a PyTorch reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/isa/kernel_table.h"
#include "backend/ops.h"
#include "core/error.h"
#include "grad_check.h"
#include "kernels/llama_math.h"
#include "lm_util.h"
#include "nn/layers/layer_util.h"
#include "nn/model.h"
#include "nn/spec.h"

namespace hpc::nn {
namespace {

using test::check_model;
using test::GRAD_TOL;
using test::GradientChecker;
using test::layer_args;
using test::random_tensor;
using test::tokens;

// ---- gradients ---------------------------------------------------------------------

TEST(LlamaGrad, RmsNorm) {
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("rmsnorm"), Shape{5, 8}, 3), GRAD_TOL);
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("rmsnorm", {}, {{"eps", 0.1}}), Shape{7}, 2),
            GRAD_TOL);
}

// Grouped kv heads (multi-query, groups of two, one per head), with and
// without rotary positions, GPT-2's packed form with grouped heads too.
TEST(LlamaGrad, AttentionGroupedRotary) {
  for (double kv : {1.0, 2.0, 4.0})
    for (double theta : {0.0, 100.0}) {
      SCOPED_TRACE(testing::Message() << "kv_heads " << kv << ", theta " << theta);
      EXPECT_LT(GradientChecker(1e-5, GRAD_TOL)
                    .check(layer_args("attn", {4}, {{"kv_heads", kv}, {"theta", theta}, {"bias", 0}}),
                           Shape{6, 16}, 2),
                GRAD_TOL);
    }
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("attn", {4}, {{"kv_heads", 2}}), Shape{5, 8}, 2),
            GRAD_TOL);
}

TEST(LlamaGrad, RopeScalings) {
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL)
                .check(layer_args("attn", {2}, {{"theta", 50}, {"linear", 4}, {"bias", 0}}), Shape{6, 8}, 2),
            GRAD_TOL);
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL)
                .check(layer_args("attn", {2}, {{"theta", 50}, {"llama3", 8}, {"orig", 4}, {"bias", 0}}),
                       Shape{6, 8}, 2),
            GRAD_TOL);
}

TEST(LlamaGrad, Mlps) {
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("swiglu", {12}), Shape{5, 8}, 2), GRAD_TOL);
  EXPECT_LT(GradientChecker(1e-5, GRAD_TOL).check(layer_args("mlp", {12}, {{"layers", 3}}), Shape{5, 8}, 2),
            GRAD_TOL);
}

TEST(LlamaGrad, Block) {
  for (double recompute : {0.0, 1.0})
    EXPECT_LT(GradientChecker(1e-5, GRAD_TOL)
                  .check(layer_args("llama_block", {4},
                                    {{"kv_heads", 2}, {"ffn", 24}, {"layers", 2}, {"recompute", recompute}}),
                         Shape{6, 16}, 2),
              GRAD_TOL);
}

TEST(LlamaGrad, WholeModels) {
  EXPECT_LT(check_model("embed(13,16,5,positions=0) llama_block(4,kv_heads=2,ffn=24,layers=2) "
                        "llama_block(4,kv_heads=1,ffn=24,layers=2,recompute=1) rmsnorm lm_head(13,tied=0)",
                        5, 13, 2),
            GRAD_TOL);
  EXPECT_LT(
      check_model("embed(11,8,6,positions=0) llama_block(2,ffn=12) rmsnorm(eps=0.01) lm_head(11)", 6, 11, 2),
      GRAD_TOL);
}

// ---- CPU kernel tables ------------------------------------------------------------------

std::vector<float> random_floats(int64_t n, uint64_t seed, double lo = -3, double hi = 3) {
  Rng rng(seed, 9);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = float(lo + (hi - lo) * rng.uniform());
  return v;
}

// Every table this CPU runs (AVX-512, AVX2) gives the generic loops' bits for
// the RMSNorm and SwiGLU rows, on lengths that exercise the vector bodies,
// their partial sums and their tails.
TEST(LlamaKernels, TablesAreBitwiseTheGenericLoops) {
  using backend::cpu::KernelTable;
  const KernelTable<float>& ref = backend::cpu::generic_f32_table();
  const std::vector<const KernelTable<float>*> tables = backend::cpu::runnable_tables();
  for (int64_t n : {1, 7, 8, 16, 31, 33, 100, 257}) {
    const std::vector<float> x = random_floats(n, 1), w = random_floats(n, 2), dy = random_floats(n, 3),
                             up = random_floats(n, 4), dx0 = random_floats(n, 5);
    for (const KernelTable<float>* k : tables) {
      SCOPED_TRACE(testing::Message() << k->isa << ", n " << n);
      std::vector<float> y1(static_cast<size_t>(n)), y2(static_cast<size_t>(n));
      const float rs1 = ref.rms_row(x.data(), w.data(), n, 1e-5, y1.data());
      const float rs2 = k->rms_row(x.data(), w.data(), n, 1e-5, y2.data());
      ASSERT_EQ(rs1, rs2);
      ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0);
      for (bool accumulate : {false, true}) {
        std::vector<float> dx1 = dx0, dx2 = dx0, dw1 = w, dw2 = w;
        ref.rms_backward_row(x.data(), dy.data(), w.data(), rs1, n, dx1.data(), accumulate, dw1.data());
        k->rms_backward_row(x.data(), dy.data(), w.data(), rs1, n, dx2.data(), accumulate, dw2.data());
        ASSERT_EQ(std::memcmp(dx1.data(), dx2.data(), dx1.size() * 4), 0);
        ASSERT_EQ(std::memcmp(dw1.data(), dw2.data(), dw1.size() * 4), 0);
      }
      ref.swiglu_row(x.data(), up.data(), y1.data(), n);
      k->swiglu_row(x.data(), up.data(), y2.data(), n);
      ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0);
      std::vector<float> dg1(static_cast<size_t>(n)), du1(static_cast<size_t>(n)),
          dg2(static_cast<size_t>(n)), du2(static_cast<size_t>(n));
      ref.swiglu_backward_row(x.data(), up.data(), dy.data(), dg1.data(), du1.data(), n);
      k->swiglu_backward_row(x.data(), up.data(), dy.data(), dg2.data(), du2.data(), n);
      ASSERT_EQ(std::memcmp(dg1.data(), dg2.data(), dg1.size() * 4), 0);
      ASSERT_EQ(std::memcmp(du1.data(), du2.data(), du1.size() * 4), 0);
    }
  }
}

// The float32 ops agree with the float64 ones (kernels/llama_math.h's arithmetic) to float rounding.
TEST(LlamaKernels, Float32AgreesWithFloat64) {
  const Shape rows{9, 40};
  const Tensor x64 = random_tensor(rows, DType::F64, 1, -2, 2), w64 = random_tensor(Shape{40}, DType::F64, 2);
  const Tensor x32 = random_tensor(rows, DType::F32, 1, -2, 2), w32 = random_tensor(Shape{40}, DType::F32, 2);
  Tensor y64(rows, DType::F64), r64(Shape{9}, DType::F64), y32(rows, DType::F32), r32(Shape{9}, DType::F32);
  backend::rmsnorm_forward(x64, w64, 1e-5, y64, r64);
  backend::rmsnorm_forward(x32, w32, 1e-5, y32, r32);
  const Tensor g64 = random_tensor(Shape{9, 80}, DType::F64, 3, -4, 4),
               g32 = random_tensor(Shape{9, 80}, DType::F32, 3, -4, 4);
  Tensor s64(rows, DType::F64), s32(rows, DType::F32);
  backend::swiglu_forward(g64, s64);
  backend::swiglu_forward(g32, s32);
  for (int64_t i = 0; i < rows.count(); ++i) {
    ASSERT_NEAR(y32.data<float>()[i], y64.data<double>()[i], 1e-6 * (1 + std::abs(y64.data<double>()[i])));
    ASSERT_NEAR(s32.data<float>()[i], s64.data<double>()[i], 1e-6 * (1 + std::abs(s64.data<double>()[i])));
  }
}

// ---- rotary -------------------------------------------------------------------------------

// The rotary tables of a config, in float64, positions [0, t).
void tables(int64_t t, int64_t d, double theta, const kernels::RopeScaling& s, Tensor& c, Tensor& sn) {
  c = Tensor(Shape{t, d / 2}, DType::F64);
  sn = Tensor(Shape{t, d / 2}, DType::F64);
  for (int64_t p = 0; p < t; ++p)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = double(p) * kernels::rotary_inv_freq(i, d, theta, s);
      c.data<double>()[p * d / 2 + i] = std::cos(a);
      sn.data<double>()[p * d / 2 + i] = std::sin(a);
    }
}

// Forward then inverse is the identity; forward is the rotate-half formula
// on q and k and leaves v alone; the interleaved form on columns permuted as
// Hugging Face's conversion does (2i ← i, 2i+1 ← i + d/2 within a head) is
// the rotate-half form.
TEST(LlamaRotary, RotateHalfInverseAndInterleaved) {
  const int64_t heads = 4, kv = 2, d = 8, t = 6, w = (heads + 2 * kv) * d;
  Tensor c, s;
  tables(t, d, 10000, {}, c, s);
  const Tensor x = random_tensor(Shape{2, t, w}, DType::F64, 4);
  Tensor y(x.shape(), DType::F64);
  backend::copy(x, y);
  backend::rotary_apply(y, heads, kv, c, s, false, false);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t p = 0; p < t; ++p)
      for (int64_t h = 0; h < heads + 2 * kv; ++h)
        for (int64_t i = 0; i < d / 2; ++i) {
          const int64_t at = (b * t + p) * w + h * d;
          const double x0 = x.data<double>()[at + i], x1 = x.data<double>()[at + i + d / 2];
          const double cc = c.data<double>()[p * d / 2 + i], ss = s.data<double>()[p * d / 2 + i];
          const bool rotated = h < heads + kv;  // the values' heads are not turned
          ASSERT_NEAR(y.data<double>()[at + i], rotated ? x0 * cc - x1 * ss : x0, 1e-15);
          ASSERT_NEAR(y.data<double>()[at + i + d / 2], rotated ? x1 * cc + x0 * ss : x1, 1e-15);
        }
  Tensor z(x.shape(), DType::F64);
  backend::copy(y, z);
  backend::rotary_apply(z, heads, kv, c, s, false, true);
  for (int64_t i = 0; i < x.count(); ++i) ASSERT_NEAR(z.data<double>()[i], x.data<double>()[i], 1e-14);
  // Interleaved on permuted columns.
  Tensor perm(x.shape(), DType::F64);
  for (int64_t r = 0; r < 2 * t; ++r)
    for (int64_t h = 0; h < heads + 2 * kv; ++h)
      for (int64_t i = 0; i < d / 2; ++i) {
        const double* src = x.data<double>() + r * w + h * d;
        double* dst = perm.data<double>() + r * w + h * d;
        dst[2 * i] = src[i];
        dst[2 * i + 1] = src[i + d / 2];
      }
  backend::rotary_apply(perm, heads, kv, c, s, true, false);
  for (int64_t r = 0; r < 2 * t; ++r)
    for (int64_t h = 0; h < heads + 2 * kv; ++h)
      for (int64_t i = 0; i < d / 2; ++i) {
        const double* a = perm.data<double>() + r * w + h * d;
        const double* b = y.data<double>() + r * w + h * d;
        ASSERT_EQ(a[2 * i], b[i]);
        ASSERT_EQ(a[2 * i + 1], b[i + d / 2]);
      }
}

// Llama 3's frequency bands: high frequencies kept, low ones divided by the
// factor, the band between interpolated; linear divides all.
TEST(LlamaRotary, Scalings) {
  const int64_t d = 64;
  kernels::RopeScaling l3{kernels::RopeScaling::Kind::Llama3, 32, 1, 4, 8192};
  EXPECT_EQ(kernels::rotary_inv_freq(0, d, 500000, l3), 1.0);  // wavelength 2π < 8192/4
  const double last = 1.0 / std::pow(500000.0, 62.0 / 64.0);   // wavelength ≫ 8192
  EXPECT_DOUBLE_EQ(kernels::rotary_inv_freq(31, d, 500000, l3), last / 32);
  for (int64_t i = 0; i < 32; ++i) {
    const double f = 1.0 / std::pow(500000.0, double(2 * i) / d),
                 g = kernels::rotary_inv_freq(i, d, 500000, l3);
    EXPECT_LE(g, f);
    EXPECT_GE(g, f / 32 * (1 - 1e-15));
  }
  kernels::RopeScaling lin{kernels::RopeScaling::Kind::Linear, 4, 1, 4, 8192};
  EXPECT_DOUBLE_EQ(kernels::rotary_inv_freq(5, d, 10000, lin), kernels::rotary_inv_freq(5, d, 10000, {}) / 4);
}

// ---- incremental decoding --------------------------------------------------------------

// The logits of decoding a sequence (a 5-token prompt, then one token at a
// time, past the training window for rotary positions) are those of one
// forward over a window holding the whole sequence.
void expect_decode_matches_forward(const std::string& spec, int64_t t_len, int64_t vocab, double tol) {
  SCOPED_TRACE(spec);
  Model m(spec, Shape{t_len}, DType::F64, 3);
  backend::copy(random_tensor(Shape{m.num_params()}, DType::F64, 4, -0.3, 0.3), m.params());
  const Tensor ids = tokens(1, t_len, vocab, DType::F64, 5);
  const Tensor full(m.output_shape().with_batch(1), DType::F64);
  backend::copy(m.forward(ids, {}), full);
  m.start_decode(t_len);
  int64_t pos = 0;
  for (int64_t n : {int64_t(5), int64_t(1), int64_t(1), int64_t(3)})
    for (; pos + n <= t_len; pos += n) {
      const Tensor chunk = ids.slice(pos, Shape{1, n});
      const Tensor& out = m.decode(chunk, pos, {});
      for (int64_t i = 0; i < n * vocab; ++i)
        ASSERT_NEAR(out.data<double>()[i], full.data<double>()[pos * vocab + i], tol) << "position " << pos;
      if (n == 5) break;  // the prompt once
    }
  EXPECT_EQ(pos, t_len);
}

TEST(LlamaDecode, MatchesTheFullForward) {
  expect_decode_matches_forward(
      "embed(17,16,12,positions=0) llama_block(4,kv_heads=2,ffn=24,layers=2) "
      "llama_block(4,kv_heads=1,ffn=24) "
      "rmsnorm lm_head(17,tied=0)",
      12, 17, 1e-12);
  expect_decode_matches_forward("embed(17,16,12) block(2,layers=2) block(2) ln lm_head(17)", 12, 17, 1e-12);
}

TEST(LlamaDecode, RefusesLayersWithoutIt) {
  Model m("flatten linear(4)", Shape{3}, DType::F32, 1);
  EXPECT_THROW(m.start_decode(4), UserError);
  Model gpt("embed(5,8,4) block(2) ln lm_head(5)", Shape{4}, DType::F32, 1);
  gpt.start_decode(8);
  Tensor ids(Shape{1, 1}, DType::F32);
  EXPECT_THROW(gpt.decode(ids, 4, {}), UserError);  // past the 4 learned positions
}

// ---- presets and errors -----------------------------------------------------------------

// Parameters of a spec without allocating the model (the 1B presets).
int64_t spec_params(const std::string& spec, int64_t context) {
  Shape shape{context};
  int64_t total = 0;
  for (const LayerArgs& a : parse_spec(spec)) {
    std::unique_ptr<Layer> l = make_layer(a);
    shape = l->build(shape, DType::F32);
    for (const ParamSpec& p : l->param_specs())
      if (p.tied_to.empty()) total += p.shape.count();
  }
  return total;
}

TEST(LlamaPresets, ShapesAndParameterCounts) {
  PresetOptions cfg;
  cfg.preset = "llama-tiny";
  const std::string tiny = preset_spec(cfg, 256);
  EXPECT_EQ(tiny,
            "embed(256,64,64,positions=0) llama_block(4,kv_heads=2,ffn=192,layers=2) "
            "llama_block(4,kv_heads=2,ffn=192,layers=2) rmsnorm lm_head(256,tied=0)");
  Model m(tiny, Shape{64}, DType::F32, 1);
  const int64_t c =
      64;  // embed, head; per block q, k, v (half), o, three MLP matrices, two norms; final norm
  EXPECT_EQ(m.num_params(), 2 * 256 * c + 2 * (c * c * 3 + 3 * c * 192 + 2 * c) + c);
  // The published parameter counts of the real models.
  cfg.preset = "tinyllama-1.1b";
  EXPECT_EQ(spec_params(preset_spec(cfg, 32000), 2048), 1100048384);
  cfg.preset = "llama3.2-1b";
  const std::string l3 = preset_spec(cfg, 128256);
  EXPECT_NE(l3.find("theta=500000,llama3=32,low=1,high=4,orig=8192"), std::string::npos) << l3;
  EXPECT_EQ(spec_params(l3, 2048), 1235814400);
  // The GPT presets are unchanged.
  cfg.preset = "gpt-tiny";
  EXPECT_EQ(preset_spec(cfg, 256), "embed(256,64,64) block(2,layers=2) block(2,layers=2) ln lm_head(256)");
}

TEST(LlamaPresets, Errors) {
  PresetOptions cfg;
  cfg.preset = "llama-tiny";
  cfg.kv_heads = 3;
  EXPECT_THROW(preset_spec(cfg, 256), UserError);  // 4 heads, 3 kv heads
  cfg.kv_heads = 0;
  cfg.heads = 3;
  EXPECT_THROW(preset_spec(cfg, 256), UserError);  // 64 not a multiple of 3
  auto layer_error = [](const std::string& spec, const char* needle) {
    try {
      const Model model("embed(10,16,4,positions=0) " + spec + " rmsnorm lm_head(10)", Shape{4}, DType::F32,
                        1);
      ADD_FAILURE() << spec << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  layer_error("llama_block(4,kv_heads=3)", "not a multiple of kv_heads 3");
  layer_error("llama_block(4,linear=2,llama3=8)", "give one");
  layer_error("llama_block(4,theta=0)", "theta must be positive");
  layer_error("attn(4,kv_heads=2,bias=0,theta=10,eps=1)", "unknown argument 'eps'");
  layer_error("attn(16,theta=10)", "even head width");  // 16 heads of one dimension
  layer_error("attn(4,kv_heads=8)", "not a multiple of the 8 kv_heads");
  EXPECT_THROW(Model("embed(10,16,4,positions=2)", Shape{4}, DType::F32, 1), UserError);
}

// ---- the PyTorch cross-check's dump --------------------------------------------------------

// Run by tests/e2e/llama_vs_torch.sh with HPCTRAIN_LLAMA_EXPORT=DIR: for each
// case below, the model in float32 (weights perturbed off their initial
// values) and in float64 from the same float32 weights, one batch: weights,
// parameter table, ids, targets, logits, losses and gradients as .npy, and
// the spec, into DIR/CASE/.
TEST(LlamaExport, DISABLED_TorchExport) {
  const char* dir = std::getenv("HPCTRAIN_LLAMA_EXPORT");
  ASSERT_NE(dir, nullptr) << "set HPCTRAIN_LLAMA_EXPORT to an output directory";
  struct Case {
    const char* name;
    std::string spec;
    int64_t t_len;
  };
  PresetOptions tiny;
  tiny.preset = "llama-tiny";
  PresetOptions longer = tiny;
  longer.context = 160;  // rotary positions past the preset's 64-token window
  const Case cases[] = {
      {"tiny", preset_spec(tiny, 256), 64},
      {"long", preset_spec(longer, 256), 160},
      {"mqa_tied_llama3",
       "embed(256,64,48,positions=0) "
       "llama_block(4,kv_heads=1,ffn=96,theta=500000,llama3=8,low=1,high=4,orig=32,"
       "layers=2) llama_block(4,kv_heads=1,ffn=96,theta=500000,llama3=8,low=1,high=4,orig=32,layers=2) "
       "rmsnorm(eps=1e-6) lm_head(256)",
       48},
      {"mha_linear",
       "embed(256,64,40,positions=0) llama_block(4,ffn=160,linear=2,layers=1) rmsnorm lm_head(256,tied=0)",
       40},
  };
  const int64_t batch = 2, vocab = 256;
  for (const Case& cs : cases) {
    const std::string out = std::string(dir) + "/" + cs.name;
    ASSERT_EQ(std::system(("mkdir -p '" + out + "'").c_str()), 0);
    const Tensor ids64 = tokens(batch, cs.t_len, vocab, DType::F64, 21);
    const Tensor targets = test::next_tokens(ids64, vocab);
    Tensor weights;
    for (DType dtype : {DType::F32, DType::F64}) {
      Model m(cs.spec, Shape{cs.t_len}, dtype, 5);
      if (dtype == DType::F32) {
        const Tensor noise = random_tensor(Shape{m.num_params()}, DType::F32, 6, -0.05, 0.05);
        backend::axpy(1.0, noise, m.params());
        weights = test::as_f64(m.params());
        std::FILE* f = std::fopen((out + "/params.txt").c_str(), "w");
        ASSERT_NE(f, nullptr);
        for (const ParamInfo& p : m.param_info()) {
          std::fprintf(f, "%s %lld", p.name.c_str(), static_cast<long long>(p.offset));
          for (int64_t d : p.shape.dims()) std::fprintf(f, " %lld", static_cast<long long>(d));
          std::fprintf(f, "\n");
        }
        std::fclose(f);
        f = std::fopen((out + "/spec.txt").c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fprintf(f, "%s\n", m.spec().c_str());
        std::fclose(f);
      } else {
        backend::copy(weights, m.params());
      }
      const Tensor ids(ids64.shape(), dtype);
      backend::convert(ids64, ids);
      const Tensor dlogits(m.output_shape().with_batch(batch), dtype);
      m.zero_grads();
      const Tensor& logits = m.forward(ids, {});
      const std::string tag = dtype == DType::F32 ? "f32" : "f64";
      test::write_npy(out + "/logits_" + tag + ".npy", test::as_f64(logits));
      const LossStats s =
          make_cross_entropy(0)->forward_backward(logits, targets, batch, double(batch), dlogits);
      m.backward(dlogits, {});
      Tensor loss(Shape{1}, DType::F64);
      loss.data<double>()[0] = s.loss_sum / double(s.count);
      test::write_npy(out + "/loss_" + tag + ".npy", loss);
      test::write_npy(out + "/grads_" + tag + ".npy", test::as_f64(m.grads()));
    }
    test::write_npy(out + "/weights.npy", weights);
    Tensor ids_i32(ids64.shape(), DType::I32);
    for (int64_t i = 0; i < ids64.count(); ++i) ids_i32.data<int32_t>()[i] = int32_t(ids64.data<double>()[i]);
    test::write_npy(out + "/ids.npy", ids_i32);
    test::write_npy(out + "/targets.npy", targets);
  }
}

}  // namespace
}  // namespace hpc::nn
