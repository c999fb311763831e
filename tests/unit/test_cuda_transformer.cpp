// The transformer and Llama ops and whole gpt-tiny and llama-tiny models on the GPU against the CPU
// (backend/cuda/transformer_ops.cpp vs backend/cpu/transformer_ops.cpp), in
// float64, float32, bfloat16 and float16 with device_compare.h's per-dtype
// tolerances. The reference is the CPU op in float64 on the values the GPU
// holds; for backward ops the reference takes the GPU's own saved forward
// state (LayerNorm's mean/rstd, attention's probabilities) as its input, so
// a 16-bit rounding of that state is not counted twice.
//
// Without a GPU this binary prints "SKIPPED: no GPU" and exits 77;
// --self-check-on-cpu runs the harness with the CPU as the device under test
// (float64 and float32).
#include <cmath>
#include <optional>
#include <string>

#include "backend/ops.h"
#include "config/config.h"
#include "core/error.h"
#include "device_compare.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "optim/optimizer.h"

namespace hpc::test {
namespace {

using namespace backend;

Tensor token_ids64(const Shape& s, int64_t vocab, uint64_t seed) {
  Tensor t(s, DType::F64);
  Rng rng(seed, 29);
  for (int64_t i = 0; i < t.count(); ++i) t.data<double>()[i] = double(rng.below(uint64_t(vocab)));
  return t;
}

// A DUT copy of a host tensor's values in dtype, and the float64 values it holds.
struct Operand {
  Tensor dut, ref;
};
Operand operand(const Tensor& values64, DType d) {
  Operand o{on_dut(values64, d), Tensor()};
  o.ref = host64(o.dut);
  return o;
}

TEST(CudaTransformer, Embedding) {
  const int64_t b_n = 3, t_len = 9, vocab = 50, width = 20;
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor ids = token_ids64(Shape{b_n, t_len}, vocab, 1);
    const Operand wte = operand(random64(Shape{vocab, width}, 2), d),
                  wpe = operand(random64(Shape{12, width}, 3), d);
    Tensor y(Shape{b_n, t_len, width}, d, dut()), y_ref(Shape{b_n, t_len, width}, DType::F64);
    embedding_forward(on_dut(ids, d), wte.dut, wpe.dut, y);
    embedding_forward(ids, wte.ref, wpe.ref, y_ref);
    expect_close(y, y_ref, tol_for(d), "embedding forward");

    const Operand dy = operand(random64(y_ref.shape(), 4), d);
    const Operand dwte = operand(random64(Shape{vocab, width}, 5), d),
                  dwpe = operand(random64(Shape{12, width}, 6), d);
    embedding_backward(on_dut(ids, d), dy.dut, dwte.dut, dwpe.dut);
    embedding_backward(ids, dy.ref, dwte.ref, dwpe.ref);
    expect_close(dwte.dut, dwte.ref, tol_for(d), "embedding token gradient");
    expect_close(dwpe.dut, dwpe.ref, tol_for(d), "embedding position gradient");

    if (!self_check()) {                      // int32 ids (the CPU op takes ids in the model's dtype only)
      Tensor ids32(ids.shape(), DType::I32);  // by hand: the CPU's convert writes float dtypes only
      for (int64_t i = 0; i < ids.count(); ++i) ids32.data<int32_t>()[i] = int32_t(ids.data<double>()[i]);
      Tensor y32(y.shape(), d, dut());
      embedding_forward(raw_on_dut(ids32), wte.dut, wpe.dut, y32);
      expect_close(y32, host64(y), EXACT, "embedding forward, int32 ids");
    }
  }
}

// The last shard of a vocabulary of 50 split over 2 ranks (padded to 64: ids 32..63, of which 50..63
// padding): ids outside the shard look up 0, and only the shard's ids take gradient.
TEST(CudaTransformer, EmbeddingShard) {
  const int64_t b_n = 3, t_len = 9, vocab = 50, first = 32, rows = 32, width = 20;
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor ids = token_ids64(Shape{b_n, t_len}, vocab, 7);
    const Operand wte = operand(random64(Shape{rows, width}, 8), d),
                  wpe = operand(random64(Shape{12, width}, 9), d);
    for (bool positions : {true, false}) {
      Tensor y(Shape{b_n, t_len, width}, d, dut()), y_ref(Shape{b_n, t_len, width}, DType::F64);
      embedding_shard_forward(on_dut(ids, d), wte.dut, first, vocab, positions ? wpe.dut : Tensor(), y);
      embedding_shard_forward(ids, wte.ref, first, vocab, positions ? wpe.ref : Tensor(), y_ref);
      expect_close(y, y_ref, tol_for(d), "embedding shard forward");
    }
    const Operand dy = operand(random64(Shape{b_n, t_len, width}, 10), d);
    const Operand dwte = operand(random64(Shape{rows, width}, 11), d),
                  dwpe = operand(random64(Shape{12, width}, 12), d);
    embedding_shard_backward(on_dut(ids, d), dy.dut, dwte.dut, first, vocab, dwpe.dut);
    embedding_shard_backward(ids, dy.ref, dwte.ref, first, vocab, dwpe.ref);
    expect_close(dwte.dut, dwte.ref, tol_for(d), "embedding shard token gradient");
    expect_close(dwpe.dut, dwpe.ref, tol_for(d), "embedding shard position gradient");
  }
}

TEST(CudaTransformer, EmbeddingRefusesBadIds) {
  const int64_t vocab = 10, width = 4;
  const Tensor wte = on_dut(random64(Shape{vocab, width}, 7), DType::F32);
  const Tensor wpe = on_dut(random64(Shape{3, width}, 8), DType::F32);
  Tensor y(Shape{2, 3, width}, DType::F32, dut());
  for (double bad : {10.0, -1.0, 2.5}) {
    Tensor ids = token_ids64(Shape{2, 3}, vocab, 9);
    ids.data<double>()[4] = bad;
    try {
      embedding_forward(on_dut(ids, DType::F32), wte, wpe, y);
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("position 4"), std::string::npos) << e.what();
    }
  }
  if (self_check()) return;
  // bf16 cannot carry ids ≥ 256 exactly: refused, not read as another token's row.
  const Tensor big = on_dut(random64(Shape{300, width}, 10), DType::BF16);
  const Tensor wpe16 = on_dut(random64(Shape{3, width}, 11), DType::BF16);
  Tensor ids = token_ids64(Shape{2, 3}, 256, 12);
  ids.data<double>()[1] = 257;
  Tensor y16(Shape{2, 3, width}, DType::BF16, dut());
  try {
    embedding_forward(on_dut(ids, DType::BF16), big, wpe16, y16);
    ADD_FAILURE() << "a bf16 id of 257 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos) << e.what();
  }
}

TEST(CudaTransformer, LayerNorm) {
  const int64_t rows = 14, width = 50;
  for (DType d : float_dtypes())
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + (accumulate ? " dx +=" : " dx ="));
      const Operand x = operand(random64(Shape{2, 7, width}, 13, -1, 3), d);  // mean ≠ 0: centring matters
      const Operand gamma = operand(random64(Shape{width}, 14, 0.5, 1.5), d),
                    beta = operand(random64(Shape{width}, 15), d);
      Tensor y(x.ref.shape(), d, dut()), mean(Shape{rows}, d, dut()), rstd(Shape{rows}, d, dut());
      Tensor y_ref(x.ref.shape(), DType::F64), mean_ref(Shape{rows}, DType::F64),
          rstd_ref(Shape{rows}, DType::F64);
      layernorm_forward(x.dut, gamma.dut, beta.dut, 1e-5, y, mean, rstd);
      layernorm_forward(x.ref, gamma.ref, beta.ref, 1e-5, y_ref, mean_ref, rstd_ref);
      expect_close(y, y_ref, tol_for(d), "layernorm y");
      expect_close(mean, mean_ref, tol_for(d), "layernorm mean");
      expect_close(rstd, rstd_ref, tol_for(d), "layernorm rstd");

      const Operand dy = operand(random64(x.ref.shape(), 16), d),
                    dx = operand(random64(x.ref.shape(), 17), d);
      const Operand dgamma = operand(random64(Shape{width}, 18), d),
                    dbeta = operand(random64(Shape{width}, 19), d);
      layernorm_backward(x.dut, dy.dut, gamma.dut, mean, rstd, dx.dut, accumulate, dgamma.dut, dbeta.dut);
      layernorm_backward(x.ref, dy.ref, gamma.ref, host64(mean), host64(rstd), dx.ref, accumulate, dgamma.ref,
                         dbeta.ref);
      expect_close(dx.dut, dx.ref, tol_for(d), "layernorm dx");
      expect_close(dgamma.dut, dgamma.ref, tol_for(d), "layernorm dgamma");
      expect_close(dbeta.dut, dbeta.ref, tol_for(d), "layernorm dbeta");
    }
  // Without dx (the first LayerNorm of a model whose input needs no gradient): parameters only.
  const Operand x = operand(random64(Shape{rows, width}, 20), DType::F32);
  const Operand gamma = operand(random64(Shape{width}, 21), DType::F32);
  Tensor y(x.ref.shape(), DType::F32, dut()), mean(Shape{rows}, DType::F32, dut()),
      rstd(Shape{rows}, DType::F32, dut());
  layernorm_forward(x.dut, gamma.dut, gamma.dut, 1e-5, y, mean, rstd);
  const Operand dy = operand(random64(x.ref.shape(), 22), DType::F32);
  Tensor dg(Shape{width}, DType::F32, dut()), db(Shape{width}, DType::F32, dut());
  Tensor dg_ref(Shape{width}, DType::F64), db_ref(Shape{width}, DType::F64);
  layernorm_backward(x.dut, dy.dut, gamma.dut, mean, rstd, Tensor(), false, dg, db);
  layernorm_backward(x.ref, dy.ref, gamma.ref, host64(mean), host64(rstd), Tensor(), false, dg_ref, db_ref);
  expect_close(dg, dg_ref, tol_for(DType::F32), "layernorm dgamma without dx");
  expect_close(db, db_ref, tol_for(DType::F32), "layernorm dbeta without dx");
}

TEST(CudaTransformer, Attention) {
  struct Case {
    int64_t samples, heads, t_len, width;
  };
  // Both loop orders of the batched GEMMs; a context past one warp's 32 lanes.
  for (const Case cs : {Case{2, 3, 37, 24}, Case{3, 2, 16, 16}})
    for (DType d : float_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " B" + std::to_string(cs.samples) + " H" +
                   std::to_string(cs.heads) + " T" + std::to_string(cs.t_len));
      const int64_t b_n = cs.samples, h_n = cs.heads, t = cs.t_len, c = cs.width;
      const Operand qkv = operand(random64(Shape{b_n, t, 3 * c}, 23, -1.5, 1.5), d);
      Tensor probs(Shape{b_n, h_n, t, t}, d, dut()), out(Shape{b_n, t, c}, d, dut());
      Tensor probs_ref(probs.shape(), DType::F64), out_ref(out.shape(), DType::F64);
      fill(probs, 7.0);  // every element is written, the masked ones as exact zeros
      attention_forward(qkv.dut, h_n, h_n, probs, out);
      attention_forward(qkv.ref, h_n, h_n, probs_ref, out_ref);
      expect_close(probs, probs_ref, tol_for(d), "attention probabilities");
      expect_close(out, out_ref, tol_for(d), "attention output");
      const Tensor p_host = host64(probs);
      for (int64_t z = 0; z < b_n * h_n; ++z)
        for (int64_t i = 0; i < t; ++i)
          for (int64_t s = i + 1; s < t; ++s) ASSERT_EQ(p_host.data<double>()[(z * t + i) * t + s], 0.0);

      const Operand dout = operand(random64(out_ref.shape(), 24), d);
      Tensor dqkv(qkv.ref.shape(), d, dut()), dqkv_ref(qkv.ref.shape(), DType::F64);
      fill(dqkv, 7.0);  // written, not added
      attention_backward(qkv.dut, probs, dout.dut, h_n, h_n, dqkv, Tensor(Shape{t, t}, d, dut()));
      attention_backward(qkv.ref, p_host, dout.ref, h_n, h_n, dqkv_ref, Tensor(Shape{t, t}, DType::F64));
      expect_close(dqkv, dqkv_ref, tol_for(d), "attention dqkv");
    }
}

// ---- the llama pieces -----------------------------------------------------------------------

TEST(CudaLlama, RmsNormRotarySwiGlu) {
  const int64_t rows = 7, width = 70;
  for (DType d : float_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const Operand x = operand(random64(Shape{rows, width}, 41, -2, 2), d),
                  w = operand(random64(Shape{width}, 42), d);
    Tensor y(Shape{rows, width}, d, dut()), rstd(Shape{rows}, d, dut());
    Tensor y_ref(Shape{rows, width}, DType::F64), rstd_ref(Shape{rows}, DType::F64);
    rmsnorm_forward(x.dut, w.dut, 1e-5, y, rstd);
    rmsnorm_forward(x.ref, w.ref, 1e-5, y_ref, rstd_ref);
    expect_close(y, y_ref, tol_for(d), "rmsnorm y");
    const Operand dy = operand(random64(Shape{rows, width}, 43), d);
    Tensor dx(Shape{rows, width}, d, dut()), dw(Shape{width}, d, dut());
    Tensor dx_ref(Shape{rows, width}, DType::F64), dw_ref(Shape{width}, DType::F64);
    fill(dw, 0.0);
    rmsnorm_backward(x.dut, dy.dut, w.dut, rstd, dx, false, dw);
    rmsnorm_backward(x.ref, dy.ref, w.ref, host64(rstd), dx_ref, false, dw_ref);
    expect_close(dx, dx_ref, tol_for(d), "rmsnorm dx");
    expect_close(dw, dw_ref, tol_for(d), "rmsnorm dweight");

    const int64_t heads = 4, kv = 2, hd = 8, t = 5;
    const Operand qkv = operand(random64(Shape{2, t, (heads + 2 * kv) * hd}, 44, -2, 2), d);
    const Operand cos = operand(random64(Shape{t, hd / 2}, 45), d),
                  sin = operand(random64(Shape{t, hd / 2}, 46), d);
    for (bool inverse : {false, true}) {
      Tensor a(qkv.ref.shape(), d, dut()), a_ref(qkv.ref.shape(), DType::F64);
      copy(qkv.dut, a);
      copy(qkv.ref, a_ref);
      rotary_apply(a, heads, kv, cos.dut, sin.dut, false, inverse);
      rotary_apply(a_ref, heads, kv, cos.ref, sin.ref, false, inverse);
      expect_close(a, a_ref, tol_for(d), "rotary");
    }

    const Operand gu = operand(random64(Shape{rows, 2 * width}, 47, -5, 5), d);
    Tensor o(Shape{rows, width}, d, dut()), o_ref(Shape{rows, width}, DType::F64);
    swiglu_forward(gu.dut, o);
    swiglu_forward(gu.ref, o_ref);
    expect_close(o, o_ref, tol_for(d), "swiglu");
    Tensor dgu(gu.ref.shape(), d, dut()), dgu_ref(gu.ref.shape(), DType::F64);
    swiglu_backward(gu.dut, dy.dut, dgu);
    swiglu_backward(gu.ref, dy.ref, dgu_ref);
    expect_close(dgu, dgu_ref, tol_for(d), "swiglu backward");
  }
}

// Grouped kv heads (groups of two, multi-query) and decoding against the cache.
TEST(CudaLlama, GroupedAttentionAndDecode) {
  const int64_t b_n = 2, heads = 4, hd = 8, t = 37;
  for (const int64_t kv : {int64_t(2), int64_t(1)})
    for (DType d : float_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " kv_heads " + std::to_string(kv));
      const int64_t w = (heads + 2 * kv) * hd, c = heads * hd;
      const Operand qkv = operand(random64(Shape{b_n, t, w}, 48, -1.5, 1.5), d);
      Tensor probs(Shape{b_n, heads, t, t}, d, dut()), out(Shape{b_n, t, c}, d, dut());
      Tensor probs_ref(probs.shape(), DType::F64), out_ref(out.shape(), DType::F64);
      attention_forward(qkv.dut, heads, kv, probs, out);
      attention_forward(qkv.ref, heads, kv, probs_ref, out_ref);
      expect_close(out, out_ref, tol_for(d), "grouped attention output");
      const Operand dout = operand(random64(out_ref.shape(), 49), d);
      Tensor dqkv(qkv.ref.shape(), d, dut()), dqkv_ref(qkv.ref.shape(), DType::F64);
      attention_backward(qkv.dut, probs, dout.dut, heads, kv, dqkv, Tensor(Shape{t, t}, d, dut()));
      attention_backward(qkv.ref, host64(probs), dout.ref, heads, kv, dqkv_ref,
                         Tensor(Shape{t, t}, DType::F64));
      expect_close(dqkv, dqkv_ref, tol_for(d), "grouped attention dqkv");

      const Operand one = operand(random64(Shape{1, 6, w}, 50, -1.5, 1.5), d);
      Tensor kc(Shape{8, kv * hd}, d, dut()), vc(kc.shape(), d, dut()), o(Shape{1, 6, c}, d, dut());
      Tensor kc_ref(kc.shape(), DType::F64), vc_ref(kc.shape(), DType::F64), o_ref(o.shape(), DType::F64);
      attention_decode(one.dut, heads, kv, kc, vc, 2, o);
      attention_decode(one.ref, heads, kv, kc_ref, vc_ref, 2, o_ref);
      expect_close(o, o_ref, tol_for(d), "decoded attention");
    }
}

// ---- gpt-tiny: forward, loss, backward and a few AdamW steps against the CPU ---------------

struct Gpt {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<nn::Loss> loss = nn::make_cross_entropy(0.0);
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor dlogits;
  Device device;
  DType dtype;
  static constexpr int64_t BATCH = 3, CONTEXT = 32, VOCAB = 256;

  Gpt(Device dev, DType dt, const char* preset = "gpt-tiny") : device(dev), dtype(dt) {
    nn::PresetOptions cfg;
    cfg.preset = preset;
    cfg.context = CONTEXT;
    model = std::make_unique<nn::Model>(nn::preset_spec(cfg, VOCAB), Shape{CONTEXT}, dt, 11, dev);
    OptimConfig oc;
    oc.name = OptimizerKind::AdamW;
    oc.weight_decay = 0.1;
    // Only full-precision models step here: a 16-bit model trains through MixedPrecision's
    // float32 master copy, and the optimizer refuses 16-bit parameters.
    if (dt == DType::F32 || dt == DType::F64)
      optimizer = optim::Optimizer::create(oc, model->params(), optim::decay_ranges_of(model->param_info()));
    dlogits = Tensor(model->output_shape().with_batch(BATCH), dt, dev);
  }
  // Forward, loss and backward on (ids, targets); the mean loss per token. Ids in the model's
  // dtype, or in ids_dtype (the trainer hands a GPU language model float32 ids: train/batch_upload.h).
  double forward_backward(const Tensor& ids64, const Tensor& targets, std::optional<DType> ids_dtype = {}) {
    const DType xd = ids_dtype.value_or(dtype);
    const Tensor x = device == Device::CPU ? host_as(ids64, xd) : on_dut(ids64, xd, device);
    Tensor y = targets;
    if (device != Device::CPU) {
      y = Tensor(targets.shape(), DType::I32, device);
      copy(targets, y);
    }
    nn::RunCtx rc;
    model->zero_grads();
    const nn::LossStats s = loss->forward_backward(model->forward(x, rc), y, BATCH, BATCH, dlogits);
    model->backward(dlogits, rc);
    return s.loss_sum / double(s.count);
  }
};

Tensor next_tokens(const Tensor& ids64) {
  Tensor y(ids64.shape(), DType::I32);
  for (int64_t i = 0; i < y.count(); ++i)
    y.data<int32_t>()[i] = int32_t((int64_t(ids64.data<double>()[i]) * 7 + 3) % Gpt::VOCAB);
  return y;
}

TEST(CudaGpt, TinyModelMatchesTheCpu) {
  const Tensor ids = token_ids64(Shape{Gpt::BATCH, Gpt::CONTEXT}, Gpt::VOCAB, 30);
  const Tensor targets = next_tokens(ids);
  for (DType d : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtype_name(d));
    Gpt cpu(Device::CPU, d), gpu(dut(), d);
    expect_close(gpu.model->params(), host64(cpu.model->params()), EXACT, "initial parameters");
    const double lc = cpu.forward_backward(ids, targets), lg = gpu.forward_backward(ids, targets);
    const Tol tol = d == DType::F64 ? Tol{1e-11, 1e-9} : Tol{1e-5, 1e-3};
    EXPECT_NEAR(lg, lc, tol.atol + tol.rtol * std::abs(lc));
    expect_close(gpu.model->grads(), host64(cpu.model->grads()), tol, "gpt-tiny gradients");
  }
  // A few AdamW steps in float32: the GPU's losses follow the CPU's.
  Gpt cpu(Device::CPU, DType::F32), gpu(dut(), DType::F32);
  for (int step = 0; step < 5; ++step) {
    const double lc = cpu.forward_backward(ids, targets), lg = gpu.forward_backward(ids, targets);
    EXPECT_NEAR(lg, lc, 1e-4 * std::abs(lc)) << "step " << step;
    cpu.optimizer->step(cpu.model->params(), cpu.model->grads(), 1e-3);
    gpu.optimizer->step(gpu.model->params(), gpu.model->grads(), 1e-3);
  }
}

TEST(CudaLlama, TinyModelMatchesTheCpu) {
  const Tensor ids = token_ids64(Shape{Gpt::BATCH, Gpt::CONTEXT}, Gpt::VOCAB, 32);
  const Tensor targets = next_tokens(ids);
  for (DType d : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtype_name(d));
    Gpt cpu(Device::CPU, d, "llama-tiny"), gpu(dut(), d, "llama-tiny");
    const double lc = cpu.forward_backward(ids, targets), lg = gpu.forward_backward(ids, targets);
    const Tol tol = d == DType::F64 ? Tol{1e-11, 1e-9} : Tol{1e-5, 1e-3};
    EXPECT_NEAR(lg, lc, tol.atol + tol.rtol * std::abs(lc));
    expect_close(gpu.model->grads(), host64(cpu.model->grads()), tol, "llama-tiny gradients");
  }
}

// A bf16 / fp16 gpt-tiny (16-bit activations, fp32 accumulation) gives the
// fp32 model's loss and gradient direction.
TEST(CudaGpt, SixteenBitFollowsFp32) {
  if (self_check()) GTEST_SKIP() << "bf16 and fp16 need a GPU";
  const Tensor ids = token_ids64(Shape{Gpt::BATCH, Gpt::CONTEXT}, Gpt::VOCAB, 31);
  const Tensor targets = next_tokens(ids);
  Gpt ref(dut(), DType::F32);
  const double l32 = ref.forward_backward(ids, targets);
  const Tensor g32 = host64(ref.model->grads());
  for (DType d : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(d));
    Gpt low(dut(), d);
    const double l = low.forward_backward(ids, targets);
    EXPECT_NEAR(l, l32, 0.02 * l32);
    // float32 ids into the 16-bit model (ids < 256: the same ids): the same bits.
    EXPECT_EQ(low.forward_backward(ids, targets, DType::F32), l);
    const Tensor g = host64(low.model->grads());
    double dot = 0, n32 = 0, n16 = 0;
    for (int64_t i = 0; i < g.count(); ++i) {
      dot += g.data<double>()[i] * g32.data<double>()[i];
      n32 += g32.data<double>()[i] * g32.data<double>()[i];
      n16 += g.data<double>()[i] * g.data<double>()[i];
    }
    EXPECT_GT(dot / std::sqrt(n32 * n16), 0.97) << "cosine of the 16-bit and fp32 gradients";
  }
}

}  // namespace
}  // namespace hpc::test

HPC_DEVICE_TEST_MAIN()
