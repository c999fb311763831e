// Tensor parallelism without MPI (nn/tensor_parallel.h), the ranks of a
// group played by threads (tp_threads.h):
//   - the vocabulary split and the parameter shards' index maps;
//   - the vocabulary-parallel cross-entropy against the unsplit one, with a
//     vocabulary that is not a multiple of 128·T, labels in every shard and
//     next to the padding, label smoothing on and off, and padded logits
//     planted huge (they must never win or take a gradient);
//   - GPT- and Llama-shaped models (tied and untied heads, grouped kv heads,
//     recompute, dropout) split over T = 2 and 4 ranks, with and without
//     sequence parallelism, against the unsplit model: each rank's
//     parameters are its slice of the unsplit initialisation (bit for bit),
//     and the logits, the loss, every gradient and a few AdamW steps agree
//     (float64, 1e-12 relative); replicated gradients are identical on every
//     rank without sequence parallelism, and after the trainer's sum of the
//     tp_partial ones with it;
//   - a rank that takes its parts of the unsplit tensors (a resume on
//     another grid) computes the unsplit logits;
//   - the bad inputs: layers that cannot split, heads, kv heads, ffn or a
//     context that do not divide by T, each a one-line UserError (exit 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/rng.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/spec.h"
#include "nn/tensor_parallel.h"
#include "tp_threads.h"
#include "train/tp_state.h"

using namespace hpc;
using hpc::nn::ParamShard;
using hpc::nn::TpSplit;
using hpc::nn::VocabSplit;

namespace {

double rel(double a, double b) {
  return std::abs(a - b) / std::max(1e-300, std::max(std::abs(a), std::abs(b)));
}

}  // namespace

TEST(TensorParallel, TheVocabularyIsPaddedToAMultipleOf128TimesT) {
  EXPECT_EQ(nn::vocab_split(50257, TpSplit{1, 0}).padded, 50257) << "unsplit: no padding";
  const VocabSplit v = nn::vocab_split(50257, TpSplit{2, 1});
  EXPECT_EQ(v.padded, 50432);
  EXPECT_EQ(v.shard, 25216);
  EXPECT_EQ(v.first, 25216);
  EXPECT_EQ(v.real_in_shard(), 50257 - 25216);
  const VocabSplit w = nn::vocab_split(300, TpSplit{4, 3});  // 512: the last shard is all padding
  EXPECT_EQ(w.padded, 512);
  EXPECT_EQ(w.real_in_shard(), 0);
}

TEST(TensorParallel, ShardsMapOntoTheUnsplitTensor) {
  // Rows 2..3 of a [5, 3] tensor padded to 6 rows, rank 1 of 3.
  const ParamShard s = ParamShard::block(Shape{5, 3}, 0, 3, 2, 6);
  EXPECT_EQ(s.local_shape(), (Shape{2, 3}));
  EXPECT_EQ(s.global_index(), (std::vector<int64_t>{12, 13, 14, -1, -1, -1}));
  // Columns: a [2, 4] tensor's columns 2..3, and three pieces (GPT-2's packed q|k|v by heads).
  EXPECT_EQ(ParamShard::block(Shape{2, 4}, 1, 2, 1).global_index(), (std::vector<int64_t>{2, 3, 6, 7}));
  ParamShard qkv;
  qkv.dim = 1, qkv.full = Shape{1, 6};
  qkv.pieces = {{0, 1, 1}, {1, 3, 1}, {2, 5, 1}};
  EXPECT_EQ(qkv.global_index(), (std::vector<int64_t>{1, 3, 5}));
  Tensor full(Shape{5, 3}, DType::F64), part(Shape{2, 3}, DType::F64), back(Shape{5, 3}, DType::F64);
  for (int64_t i = 0; i < 15; ++i) full.data<double>()[i] = double(i) + 0.5;
  backend::fill(back, 0.0);
  nn::take_shard(full, s, part);
  EXPECT_EQ(part.data<double>()[2], 14.5);
  EXPECT_EQ(part.data<double>()[3], 0.0) << "padding is zero";
  nn::put_shard(part, s, back);
  EXPECT_EQ(back.data<double>()[14], 14.5);
  EXPECT_EQ(back.data<double>()[11], 0.0);
}

namespace {

struct CeCase {
  int tp;
  double smoothing;
};

// The unsplit loss and gradient of `logits` [rows, V] against `labels`, and the split one's from T
// threads, each with its shard of the logits (padding planted at 1e30).
void check_vocab_parallel_ce(int64_t vocab, const CeCase& c) {
  const int64_t rows = 12;
  Tensor logits(Shape{rows, vocab}, DType::F64), labels(Shape{rows}, DType::I32);
  Rng rng(7, 1);
  for (int64_t i = 0; i < logits.count(); ++i) logits.data<double>()[i] = 4 * rng.normal();
  // Labels in every shard, at its edges and next to the padding.
  const VocabSplit last = nn::vocab_split(vocab, TpSplit{c.tp, c.tp - 1});
  const int64_t shard = last.shard;
  const std::vector<int64_t> picks = {0,
                                      vocab - 1,
                                      vocab - 2,
                                      shard - 1,
                                      shard,
                                      std::min(vocab - 1, 2 * shard - 1),
                                      std::min(vocab - 1, 2 * shard),
                                      5,
                                      vocab / 2,
                                      vocab - 3,
                                      1,
                                      shard + 1};
  for (int64_t i = 0; i < rows; ++i)
    labels.data<int32_t>()[i] = static_cast<int32_t>(picks[static_cast<size_t>(i)]);
  // A row whose label has the largest logit (top-1 hit) and one with ties.
  logits.data<double>()[2 * vocab + picks[2]] = 50;
  logits.data<double>()[3 * vocab + 0] = logits.data<double>()[3 * vocab + picks[3]];
  const int64_t n_valid = rows - 1;  // the last row is padding of the batch
  Tensor dref(Shape{rows, vocab}, DType::F64);
  const nn::LossStats ref =
      nn::make_cross_entropy(c.smoothing)->forward_backward(logits, labels, n_valid, 3.0, dref);

  test::ThreadGroup group(c.tp);
  std::mutex mu;
  group.run([&](int rank) {
    test::ThreadTp tp(group, rank);
    const VocabSplit v = nn::vocab_split(vocab, TpSplit{c.tp, rank});
    Tensor part(Shape{rows, v.shard}, DType::F64), dpart(Shape{rows, v.shard}, DType::F64);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < v.shard; ++j)
        part.data<double>()[r * v.shard + j] = v.first + j < vocab
                                                   ? logits.data<double>()[r * vocab + v.first + j]
                                                   : 1e30;  // padding never wins
    const nn::LossStats got = nn::make_vocab_parallel_cross_entropy(c.smoothing, tp, v)
                                  ->forward_backward(part, labels, n_valid, 3.0, dpart);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_LT(rel(got.loss_sum, ref.loss_sum), 1e-13) << "tp " << c.tp << " rank " << rank;
    EXPECT_EQ(got.count, ref.count);
    EXPECT_EQ(got.correct1, ref.correct1);
    EXPECT_EQ(got.correct5, ref.correct5);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < v.shard; ++j) {
        const double g = dpart.data<double>()[r * v.shard + j];
        if (v.first + j >= vocab) {
          EXPECT_EQ(g, 0.0) << "a padded column takes no gradient";
          continue;
        }
        const double want = dref.data<double>()[r * vocab + v.first + j];
        EXPECT_NEAR(g, want, 1e-15 + 1e-12 * std::abs(want)) << "row " << r << " column " << v.first + j;
      }
  });
}

}  // namespace

TEST(VocabParallelCrossEntropy, MatchesTheUnsplitLossAndGradient) {
  for (const CeCase& c : {CeCase{2, 0.0}, CeCase{2, 0.1}, CeCase{3, 0.0}, CeCase{4, 0.1}})
    check_vocab_parallel_ce(300, c);  // 300: not a multiple of 128·T for any T
}

TEST(VocabParallelCrossEntropy, ALabelOutsideTheVocabularyIsOneLine) {
  test::ThreadGroup group(2);
  group.run([&](int rank) {
    test::ThreadTp tp(group, rank);
    const VocabSplit v = nn::vocab_split(200, TpSplit{2, rank});
    Tensor z(Shape{1, v.shard}, DType::F64), labels(Shape{1}, DType::I32);
    backend::fill(z, 0.0);
    labels.data<int32_t>()[0] = 200;
    try {
      nn::make_vocab_parallel_cross_entropy(0, tp, v)->forward_backward(z, labels, 1, 1.0, Tensor());
      ADD_FAILURE() << "no error";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("label 200 of sample 0 is outside the model's 200 classes"),
                std::string::npos)
          << e.what();
    }
  });
}

namespace {

// Rows of every test batch and the steps each model takes.
constexpr int64_t BATCH = 2;
constexpr int STEPS = 3;

// One model's results, in the unsplit model's flat layout (a split model's gathered by put_shard).
struct Run {
  std::vector<double> losses;   // per step
  std::vector<double> logits;   // the first step's, [BATCH·T, vocab]
  std::vector<double> grads;    // the first step's, after the sum of the tp_partial ones
  std::vector<double> params0;  // before the first step
  std::vector<double> params;   // after the last
};

// AdamW on the flat buffers, element by element (decoupled decay where the parameter decays).
struct AdamW {
  std::vector<double> m, v;
  void step(const nn::Model& model, int t) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    double* p = model.params().data<double>();
    const double* g = model.grads().data<double>();
    m.resize(static_cast<size_t>(model.num_params()));
    v.resize(m.size());
    for (const nn::ParamInfo& info : model.param_info())
      for (int64_t i = info.offset; i < info.offset + info.shape.count(); ++i) {
        const size_t k = static_cast<size_t>(i);
        m[k] = b1 * m[k] + (1 - b1) * g[i];
        v[k] = b2 * v[k] + (1 - b2) * g[i] * g[i];
        const double mh = m[k] / (1 - std::pow(b1, t)), vh = v[k] / (1 - std::pow(b2, t));
        p[i] -= lr * (mh / (std::sqrt(vh) + eps) + (info.weight_decay ? wd * p[i] : 0.0));
      }
  }
};

struct Batch {
  Tensor ids, labels;
};

Batch make_batch(int64_t vocab, int64_t ctx, int step) {
  Batch b{Tensor(Shape{BATCH, ctx}, DType::F64), Tensor(Shape{BATCH, ctx}, DType::I32)};
  for (int64_t i = 0; i < b.ids.count(); ++i) {
    b.ids.data<double>()[i] = static_cast<double>((i * 37 + 11 + 5 * step) % vocab);
    b.labels.data<int32_t>()[i] =
        static_cast<int32_t>((i * 53 + vocab - 10 + step) % vocab);  // near the padding too
  }
  return b;
}

nn::RunCtx run_ctx(nn::TpComm* tp, int step) {
  nn::RunCtx rc;
  rc.seed = 99;
  rc.step = static_cast<uint64_t>(step);
  rc.tp = tp;
  return rc;
}

std::vector<double> values(const Tensor& t) { return {t.data<double>(), t.data<double>() + t.count()}; }

Run run_unsplit(const std::string& spec, int64_t vocab, int64_t ctx) {
  nn::Model model(nn::parse_spec(spec), Shape{ctx}, DType::F64, 5);
  auto loss = nn::make_cross_entropy(0.1);
  Run out;
  out.params0 = values(model.params());
  AdamW opt;
  for (int s = 0; s < STEPS; ++s) {
    const Batch b = make_batch(vocab, ctx, s);
    model.zero_grads();
    const Tensor& logits = model.forward(b.ids, run_ctx(nullptr, s));
    if (s == 0) out.logits = values(logits);
    Tensor dlogits(logits.shape(), logits.dtype());
    out.losses.push_back(loss->forward_backward(logits, b.labels, BATCH, BATCH, dlogits).loss_sum);
    model.backward(dlogits, run_ctx(nullptr, s));
    if (s == 0) out.grads = values(model.grads());
    opt.step(model, s + 1);
  }
  out.params = values(model.params());
  return out;
}

// The same on T threads, each a rank of the split model; every rank's copy of the results, gathered.
// replicated_differ: set when a replicated parameter's gradient (without sequence parallelism) is not
// bitwise the same on every rank.
std::vector<Run> run_split(const std::string& spec, int64_t vocab, int64_t ctx, int t, bool sequence,
                           bool* replicated_differ) {
  test::ThreadGroup group(t);
  std::vector<Run> runs(static_cast<size_t>(t));
  std::vector<std::vector<double>> replicated(static_cast<size_t>(t));
  group.run([&](int rank) {
    test::ThreadTp tp(group, rank);
    nn::Model model(nn::parse_spec(spec), Shape{ctx}, DType::F64, 5, Device::CPU, {},
                    TpSplit{t, rank, sequence});
    auto loss = nn::make_vocab_parallel_cross_entropy(0.1, tp, model.output_vocab());
    const VocabSplit v = model.output_vocab();
    Run& out = runs[static_cast<size_t>(rank)];
    // The full flat tensor of every rank's parts: each rank puts its own, the group sums (a replicated
    // parameter is put by rank 0 only, so the sum is its value).
    const auto gather_full = [&](const Tensor& flat) {
      Tensor full(Shape{model.num_full_params()}, DType::F64);
      backend::fill(full, 0.0);
      for (const nn::ParamInfo& p : model.param_info()) {
        if (!p.shard.split() && rank != 0) continue;
        const Tensor part = flat.slice(p.offset, p.shape);
        nn::put_shard(part, p.shard, full.slice(p.full_offset, p.full_shape));
      }
      tp.sum(full);
      return values(full);
    };
    out.params0 = gather_full(model.params());
    AdamW opt;
    for (int s = 0; s < STEPS; ++s) {
      const Batch b = make_batch(vocab, ctx, s);
      model.zero_grads();
      const Tensor& logits = model.forward(b.ids, run_ctx(&tp, s));
      if (s == 0) {  // this rank's columns into the full [rows, vocab] logits
        const int64_t rows = logits.count() / v.shard;
        Tensor full(Shape{rows, vocab}, DType::F64);
        backend::fill(full, 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < v.real_in_shard(); ++j)
            full.data<double>()[r * vocab + v.first + j] = logits.data<double>()[r * v.shard + j];
        tp.sum(full);
        out.logits = values(full);
      }
      Tensor dlogits(logits.shape(), logits.dtype());
      out.losses.push_back(loss->forward_backward(logits, b.labels, BATCH, BATCH, dlogits).loss_sum);
      model.backward(dlogits, run_ctx(&tp, s));
      for (const nn::ParamInfo& p : model.param_info()) {  // the trainer's sum of the partial gradients
        // Under sequence parallelism every replicated parameter but the positions' (whose gradient
        // comes from the gathered rows) is used on this rank's rows only.
        EXPECT_EQ(p.tp_partial, sequence && !p.shard.split() && p.name.find("position") == std::string::npos)
            << p.name;
        if (p.tp_partial) tp.sum(model.grads().slice(p.offset, p.shape));
      }
      if (s == 0) {
        out.grads = gather_full(model.grads());
        std::vector<double>& mine = replicated[static_cast<size_t>(rank)];
        for (const nn::ParamInfo& p : model.param_info())
          if (!p.shard.split())
            for (int64_t i = 0; i < p.shape.count(); ++i)
              mine.push_back(model.grads().data<double>()[p.offset + i]);
      }
      opt.step(model, s + 1);
    }
    out.params = gather_full(model.params());
  });
  *replicated_differ = false;
  for (const std::vector<double>& r : replicated)
    *replicated_differ = *replicated_differ || r != replicated[0];
  return runs;
}

// |got − want| within 1e-12 of the larger of |want| and `floor` times the vector's largest entry
// (entries that cancel to near zero carry the rounding of the large terms they came from).
void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                  double floor = 1e-2) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-12 * std::max(std::abs(want[i]), floor * scale))) {
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " vs " << want[i];
      ++bad;
    }
}

struct ModelCase {
  const char* name;
  std::string spec;
  int64_t vocab, ctx;
};

void check_model(const ModelCase& c) {
  const Run want = run_unsplit(c.spec, c.vocab, c.ctx);
  for (int t : {2, 4})
    for (bool sequence : {false, true}) {
      const std::string what = std::string(c.name) + " tp " + std::to_string(t) + (sequence ? " sp" : "");
      bool replicated_differ = false;
      const std::vector<Run> runs = run_split(c.spec, c.vocab, c.ctx, t, sequence, &replicated_differ);
      if (!sequence) {
        EXPECT_FALSE(replicated_differ) << what << ": replicated gradients differ across ranks";
      }
      for (int rank = 0; rank < t; ++rank) {
        const Run& got = runs[static_cast<size_t>(rank)];
        const std::string who = what + " rank " + std::to_string(rank);
        EXPECT_EQ(got.params0, want.params0) << who << ": the parts are not the unsplit initialisation";
        expect_close(got.logits, want.logits, who + " logits");
        expect_close(got.losses, want.losses, who + " losses");
        expect_close(got.grads, want.grads, who + " gradients");
        // AdamW divides each gradient by its own size: a gradient that is zero but for rounding (the
        // key bias's: softmax ignores it) moves its parameter by rounding noise, and small ones carry
        // their relative rounding into steps of size lr. Parameters: within 1e-12 of the largest.
        expect_close(got.params, want.params, who + " parameters after AdamW", 1.0);
      }
    }
}

}  // namespace

TEST(TensorParallel, GptSplitEqualsUnsplit) {
  // Tied head, learned positions, dropout outside the blocks, and a block with grouped kv heads
  // (GPT-2's packed qkv in three pieces per rank).
  check_model({"gpt",
               "embed(300,32,8) dropout(0.1) block(4,layers=2) block(8,kv_heads=4,layers=2) ln lm_head(300)",
               300, 8});
}

TEST(TensorParallel, GptUntiedRecomputeSplitEqualsUnsplit) {
  check_model({"gpt untied", "embed(300,32,8) block(4,layers=1,recompute=1) ln lm_head(300,tied=0)", 300, 8});
}

TEST(TensorParallel, LlamaSplitEqualsUnsplit) {
  // Rotary, RMSNorm, SwiGLU, 8 heads on 4 kv heads (one kv head per rank at T = 4), untied and tied.
  check_model({"llama",
               "embed(300,32,8,positions=0) llama_block(8,kv_heads=4,ffn=64,layers=2) "
               "llama_block(8,kv_heads=4,ffn=64,layers=2,recompute=1) rmsnorm lm_head(300,tied=0)",
               300, 8});
  check_model({"llama tied",
               "embed(260,32,8,positions=0) llama_block(8,kv_heads=4,ffn=64) rmsnorm lm_head(260)", 260, 8});
}

// What a resume on another grid does: each rank takes its parts of the unsplit model's tensors
// (take_shard by ParamInfo), whatever its own initialisation, and then computes the unsplit logits.
TEST(TensorParallel, ARankLoadsItsPartsOfTheUnsplitTensors) {
  const std::string spec =
      "embed(300,32,8,positions=0) llama_block(8,kv_heads=4,ffn=64) rmsnorm lm_head(300)";
  nn::Model ref(nn::parse_spec(spec), Shape{8}, DType::F64, 5);
  const Batch b = make_batch(300, 8, 0);
  const std::vector<double> want = values(ref.forward(b.ids, run_ctx(nullptr, 0)));
  for (int t : {2, 4}) {
    test::ThreadGroup group(t);
    group.run([&](int rank) {
      test::ThreadTp tp(group, rank);
      nn::Model m(nn::parse_spec(spec), Shape{8}, DType::F64, 123, Device::CPU, {}, TpSplit{t, rank});
      for (const nn::ParamInfo& p : m.param_info())
        nn::take_shard(ref.params().slice(p.full_offset, p.full_shape), p.shard,
                       m.params().slice(p.offset, p.shape));
      const Tensor& logits = m.forward(b.ids, run_ctx(&tp, 0));
      const VocabSplit v = m.output_vocab();
      const int64_t rows = logits.count() / v.shard;
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < v.real_in_shard(); ++j) {
          const double w = want[static_cast<size_t>(r * 300 + v.first + j)];
          worst = std::max(
              worst, std::abs(logits.data<double>()[r * v.shard + j] - w) / std::max(std::abs(w), 1e-3));
        }
      EXPECT_LT(worst, 1e-12) << "tp " << t << " rank " << rank;
    });
  }
}

// A resume takes a split model's parts one unsplit tensor at a time (train::take_parts_of, in the
// whole model's order): every element of the rank's buffer, the same as taking them from the whole
// unsplit buffer at once, for every rank of tp 2 and 4.
TEST(TensorParallel, TakingThePartsOneUnsplitTensorAtATimeFillsTheRankExactly) {
  const std::string spec =
      "embed(300,32,8,positions=0) llama_block(8,kv_heads=4,ffn=64) rmsnorm lm_head(300)";
  const nn::Model ref(nn::parse_spec(spec), Shape{8}, DType::F32, 5);
  for (int t : {2, 4})
    for (int rank = 0; rank < t; ++rank) {
      const nn::Model m(nn::parse_spec(spec), Shape{8}, DType::F32, 123, Device::CPU, {}, TpSplit{t, rank});
      const Tensor want(Shape{m.num_params()}, DType::F32), got(Shape{m.num_params()}, DType::F32);
      std::fill_n(got.data<float>(), got.count(), std::numeric_limits<float>::quiet_NaN());  // none left
      for (const nn::ParamInfo& p : m.param_info())
        nn::take_shard(ref.params().slice(p.full_offset, p.full_shape), p.shard,
                       want.slice(p.offset, p.shape));
      for (const nn::ParamInfo& f : ref.param_info())
        train::take_parts_of(m, f.offset, ref.params().slice(f.offset, f.shape), got);
      EXPECT_EQ(0, std::memcmp(want.data<float>(), got.data<float>(), static_cast<size_t>(want.count()) * 4))
          << "tp " << t << " rank " << rank;
    }
}

TEST(TensorParallel, ParamInfoDescribesTheUnsplitLayout) {
  const std::string spec = "embed(300,32,8) block(4) ln lm_head(300,tied=0)";
  const nn::Model full(nn::parse_spec(spec), Shape{8}, DType::F32, 1);
  const nn::Model part(nn::parse_spec(spec), Shape{8}, DType::F32, 1, Device::CPU, {}, TpSplit{2, 1});
  EXPECT_EQ(part.num_full_params(), full.num_params());
  EXPECT_EQ(full.num_full_params(), full.num_params());
  ASSERT_EQ(part.param_info().size(), full.param_info().size());
  for (size_t i = 0; i < part.param_info().size(); ++i) {
    const nn::ParamInfo &p = part.param_info()[i], &f = full.param_info()[i];
    EXPECT_EQ(p.name, f.name);
    EXPECT_EQ(p.full_offset, f.offset) << p.name;
    EXPECT_EQ(p.full_shape, f.shape) << p.name;
    EXPECT_EQ(f.full_offset, f.offset) << f.name;
  }
  EXPECT_EQ(part.output_vocab().padded, 512);
  EXPECT_EQ(part.output_vocab().first, 256);
  EXPECT_EQ(part.output_shape(), (Shape{8, 256}));
  EXPECT_EQ(part.split().size, 2);
}

namespace {

// The UserError (exit 2) a split model's construction throws.
std::string build_error(const std::string& spec, const Shape& in, const TpSplit& tp) {
  try {
    const nn::Model m(nn::parse_spec(spec), in, DType::F32, 1, Device::CPU, {}, tp);
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << spec << ": built";
  return "";
}

}  // namespace

TEST(TensorParallel, ALayerThatCannotSplitIsNamed) {
  EXPECT_EQ(build_error("flatten linear(8) relu linear(4)", Shape{1, 4, 4}, TpSplit{2, 0}),
            "dist.tp 2: layer 1 'linear(8)' cannot be split over a tensor-parallel group (tensor parallelism "
            "splits the transformer models' layers); use --dist.tp 1 for this model");
}

TEST(TensorParallel, HeadsKvHeadsFfnAndContextMustDivide) {
  const std::string heads = build_error("embed(300,36,8) block(6) ln lm_head(300)", Shape{8}, TpSplit{4, 0});
  EXPECT_NE(heads.find("block(6) > attn"), std::string::npos) << heads;
  EXPECT_NE(heads.find("its 6 heads and 6 kv_heads cannot be split over dist.tp 4 ranks"), std::string::npos)
      << heads;
  const std::string kv = build_error(
      "embed(300,32,8,positions=0) llama_block(8,kv_heads=2) rmsnorm lm_head(300)", Shape{8}, TpSplit{4, 3});
  EXPECT_NE(kv.find("its 8 heads and 2 kv_heads cannot be split over dist.tp 4"), std::string::npos) << kv;
  const std::string ffn =
      build_error("embed(300,32,8) block(4,ffn=66) ln lm_head(300)", Shape{8}, TpSplit{4, 0});
  EXPECT_NE(ffn.find("its 66 ffn columns cannot be split over dist.tp 4 ranks"), std::string::npos) << ffn;
  EXPECT_EQ(
      build_error("embed(300,32,6) block(4) ln lm_head(300)", Shape{6}, TpSplit{4, 0, true}),
      "dist.sequence_parallel: the context of 6 tokens is not divisible by dist.tp 4 (each rank of the group "
      "holds an equal part of the sequence)");
}
