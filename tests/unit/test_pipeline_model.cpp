// A model cut into pipeline pieces (nn::LayerRange) computes what the whole
// model computes: the pieces' initial values, names and whole-layout offsets
// are the whole model's; chained forward gives its output and backward its
// gradients bitwise (dropout included: its coordinates are the whole model's
// layer indices); a tied head on a later piece holds a copy of the embedding
// whose gradient, added to the embedding's, is the whole model's; models that
// share one piece's parameters (share_params_of) hold two micro-batches in
// flight and accumulate what one model running them in turn accumulates; a
// stage's interleaved chunks run on their parts of one holder's buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "lm_util.h"
#include "nn/model.h"
#include "nn/spec.h"

namespace hpc::nn {
namespace {

using test::random_tensor;
using test::tokens;

constexpr int64_t VOCAB = 11, CONTEXT = 6;

// Bitwise equality of two tensors of one dtype.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.count() == b.count() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.num_bytes())) == 0;
}

// The pieces [cuts[k], cuts[k + 1]) of `spec`; each but the first returns its input's gradient.
std::vector<std::unique_ptr<Model>> pieces(const std::string& spec, const std::vector<int>& cuts, DType dtype,
                                           const StoredRange& stored = {}) {
  std::vector<std::unique_ptr<Model>> out;
  for (size_t k = 0; k + 1 < cuts.size(); ++k)
    out.push_back(std::make_unique<Model>(parse_spec(spec), Shape{CONTEXT}, dtype, 5, Device::CPU, stored,
                                          TpSplit(), LayerRange{cuts[k], cuts[k + 1], k > 0}));
  return out;
}

RunCtx training(uint64_t step) {
  RunCtx rc;
  rc.training = true;
  rc.seed = 77;
  rc.step = step;
  return rc;
}

// Forward through the pieces in order; returns the last one's output.
const Tensor& chain_forward(std::vector<std::unique_ptr<Model>>& ps, const Tensor& x, const RunCtx& rc) {
  const Tensor* in = &x;
  for (auto& p : ps) in = &p->forward(*in, rc);
  return *in;
}

void chain_backward(std::vector<std::unique_ptr<Model>>& ps, const Tensor& dout, const RunCtx& rc) {
  const Tensor* dy = &dout;
  for (size_t k = ps.size(); k-- > 0;) {
    ps[k]->backward(*dy, rc);
    dy = &ps[k]->input_grad();
  }
}

const std::string UNTIED =
    "embed(11,8,6) block(2,layers=3) block(2,layers=3) dropout(0.25) block(2,layers=3) ln lm_head(11,tied=0)";
const std::string TIED = "embed(11,8,6) block(2,layers=3) block(2,layers=3) block(2,layers=3) ln lm_head(11)";

TEST(PipelineModel, PiecesHoldTheWholeModelsParameters) {
  const Model whole(parse_spec(TIED), Shape{CONTEXT}, DType::F32, 5);
  auto ps = pieces(TIED, {0, 2, 4, 6}, DType::F32);
  int64_t held = 0;
  for (const auto& p : ps) {
    EXPECT_EQ(p->num_full_params(), whole.num_params());
    for (const ParamInfo& info : p->param_info()) {
      const Tensor mine = p->params().slice(info.offset, info.shape);
      EXPECT_TRUE(same_bits(mine, whole.params().slice(info.full_offset, info.full_shape))) << info.name;
      bool named = false;
      for (const ParamInfo& w : whole.param_info())
        named |= w.name == info.name && w.offset == info.full_offset;
      EXPECT_TRUE(named) << info.name << " is not a parameter of the whole model at that offset";
      if (!info.tied_copy) held += info.shape.count();
    }
  }
  EXPECT_EQ(held, whole.num_params());  // every parameter on exactly one piece, the copy aside
  // The head's weight on the last piece is a copy of the embedding (layer 0's token matrix).
  ASSERT_EQ(ps.back()->param_info().back().name, "0.embed.token");
  EXPECT_TRUE(ps.back()->param_info().back().tied_copy);
  EXPECT_EQ(ps.back()->first_layer(), 4);
  EXPECT_EQ(ps[1]->input_shape(), (Shape{CONTEXT, 8}));
}

TEST(PipelineModel, ChainedPiecesGiveTheWholeModelsBits) {
  Model whole(parse_spec(UNTIED), Shape{CONTEXT}, DType::F32, 5);
  auto ps = pieces(UNTIED, {0, 2, 4, whole.num_layers()}, DType::F32);
  const Tensor x = tokens(3, CONTEXT, VOCAB, DType::F32, 1);
  const RunCtx rc = training(9);
  const Tensor& y = whole.forward(x, rc);
  const Tensor& yc = chain_forward(ps, x, rc);
  EXPECT_TRUE(same_bits(y, yc));  // dropout (layer 3) draws the whole model's mask
  const Tensor dout = random_tensor(y.shape(), DType::F32, 2);
  whole.zero_grads();
  whole.backward(dout, rc);
  for (auto& p : ps) p->zero_grads();
  chain_backward(ps, dout, rc);
  for (const auto& p : ps)
    for (const ParamInfo& info : p->param_info())
      EXPECT_TRUE(same_bits(p->grads().slice(info.offset, info.shape),
                            whole.grads().slice(info.full_offset, info.full_shape)))
          << info.name;
}

TEST(PipelineModel, TiedCopiesAddUpToTheWholeModelsGradient) {
  Model whole(parse_spec(TIED), Shape{CONTEXT}, DType::F64, 5);
  auto ps = pieces(TIED, {0, 3, 6}, DType::F64);
  const Tensor x = tokens(2, CONTEXT, VOCAB, DType::F64, 4);
  const RunCtx rc = training(0);
  const Tensor dout = random_tensor(whole.forward(x, rc).shape(), DType::F64, 3);
  whole.zero_grads();
  whole.backward(dout, rc);
  chain_forward(ps, x, rc);
  for (auto& p : ps) p->zero_grads();
  chain_backward(ps, dout, rc);
  const ParamInfo& embed = ps.front()->param_info().front();
  const ParamInfo& copy = ps.back()->param_info().back();
  ASSERT_TRUE(copy.tied_copy && embed.name == copy.name);
  const Tensor sum(embed.shape, DType::F64);
  backend::copy(ps.front()->grads().slice(embed.offset, embed.shape), sum);
  backend::axpy(1.0, ps.back()->grads().slice(copy.offset, copy.shape), sum);
  const Tensor ref = whole.grads().slice(0, embed.shape);
  const double* a = sum.data<double>();
  const double* b = ref.data<double>();
  for (int64_t i = 0; i < sum.count(); ++i) EXPECT_NEAR(a[i], b[i], 1e-14) << i;
}

TEST(PipelineModel, SharedPiecesHoldMicroBatchesInFlight) {
  // Two micro-batches through piece 1 of 2: forward 0, forward 1, backward 0, backward 1 (1F1B's
  // warm-up) on two models sharing the parameters, against one model running them in turn.
  const std::vector<int> cuts = {0, 3, 7};
  auto serial = pieces(UNTIED, cuts, DType::F32);
  auto primary = pieces(UNTIED, cuts, DType::F32);
  const StoredRange none{[](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; }, false};
  auto second = pieces(UNTIED, cuts, DType::F32, none);
  for (size_t k = 0; k < cuts.size() - 1; ++k) second[k]->share_params_of(*primary[k]);
  const Tensor x0 = tokens(2, CONTEXT, VOCAB, DType::F32, 7), x1 = tokens(2, CONTEXT, VOCAB, DType::F32, 8);
  const Tensor d0 = random_tensor(Shape{2, CONTEXT, VOCAB}, DType::F32, 5);
  const Tensor d1 = random_tensor(Shape{2, CONTEXT, VOCAB}, DType::F32, 6);
  for (auto& p : serial) p->zero_grads();
  chain_forward(serial, x0, training(0));
  chain_backward(serial, d0, training(0));
  chain_forward(serial, x1, training(1));
  chain_backward(serial, d1, training(1));

  for (auto& p : primary) p->zero_grads();
  chain_forward(primary, x0, training(0));
  chain_forward(second, x1, training(1));
  chain_backward(primary, d0, training(0));
  chain_backward(second, d1, training(1));
  for (size_t k = 0; k < serial.size(); ++k) EXPECT_TRUE(same_bits(serial[k]->grads(), primary[k]->grads()));
  EXPECT_EQ(second[0]->grads().count(), 0);  // its gradients went to the primary's buffer
}

TEST(PipelineModel, SharingNeedsTheSameLayers) {
  auto a = pieces(TIED, {0, 3, 6}, DType::F32);
  const StoredRange none{[](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; }, false};
  auto b = pieces(TIED, {0, 2, 6}, DType::F32, none);
  EXPECT_THROW(b[1]->share_params_of(*a[0]), Error);     // layers 2–5 are not a's 0–2
  EXPECT_THROW(b[1]->share_params_of(*a[1], 1), Error);  // nor at another offset of a's 3–5
}

TEST(PipelineModel, InterleavedChunksRunOnTheirStagesBuffers) {
  // Two stages of two chunks each (virtual stages 0–3: layers 0–1, 2, 3–4, 5–6): each stage's holder
  // lays out both of its chunks; each chunk runs as a model bound to its part of the holder.
  Model whole(parse_spec(UNTIED), Shape{CONTEXT}, DType::F32, 5);
  const std::vector<std::pair<int, int>> virt = {{0, 2}, {2, 3}, {3, 5}, {5, 7}};
  const StoredRange none{[](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; }, false};
  std::vector<std::unique_ptr<Model>> holders, chunks;
  for (int s = 0; s < 2; ++s)
    holders.push_back(
        std::make_unique<Model>(parse_spec(UNTIED), Shape{CONTEXT}, DType::F32, 5, Device::CPU, StoredRange(),
                                TpSplit(), LayerRange{virt[s].first, virt[s].second, s > 0, {virt[2 + s]}}));
  for (int v = 0; v < 4; ++v) {
    Model& holder = *holders[v % 2];
    chunks.push_back(std::make_unique<Model>(parse_spec(UNTIED), Shape{CONTEXT}, DType::F32, 5, Device::CPU,
                                             none, TpSplit(),
                                             LayerRange{virt[v].first, virt[v].second, v > 0}));
    const int local = v < 2 ? 0 : virt[v - 2].second - virt[v - 2].first;  // the chunk's first layer there
    chunks.back()->share_params_of(holder, holder.layer_begin(local));
  }
  for (const auto& h : holders)
    for (const ParamInfo& info : h->param_info())
      EXPECT_TRUE(same_bits(h->params().slice(info.offset, info.shape),
                            whole.params().slice(info.full_offset, info.full_shape)))
          << info.name;
  const Tensor x = tokens(2, CONTEXT, VOCAB, DType::F32, 3);
  const RunCtx rc = training(4);
  const Tensor& y = whole.forward(x, rc);
  EXPECT_TRUE(same_bits(y, chain_forward(chunks, x, rc)));
  const Tensor dout = random_tensor(y.shape(), DType::F32, 9);
  whole.zero_grads();
  whole.backward(dout, rc);
  for (auto& h : holders) h->zero_grads();
  chain_backward(chunks, dout, rc);
  for (const auto& h : holders)
    for (const ParamInfo& info : h->param_info())
      EXPECT_TRUE(same_bits(h->grads().slice(info.offset, info.shape),
                            whole.grads().slice(info.full_offset, info.full_shape)))
          << info.name;
}

}  // namespace
}  // namespace hpc::nn
