// Inverted dropout (Srivastava et al. 2014): training keeps an element with
// probability 1 − p and scales it by 1/(1 − p), so evaluation is the identity.
//
// The mask is never stored. It is a pure function of the run seed, a stream
// derived from (step, layer), and the element's index, so backward recomputes
// it, and a resumed run draws the same masks. Rank r (ctx.rank) draws
// indices [r·count, (r+1)·count): the ranks' masks differ, and N ranks with
// batch b draw exactly the mask of one rank with batch N·b.
//
// In a tensor-parallel model the dropout layers sit outside the split
// layers: every rank of the group draws the same mask (ctx.rank is the
// data-parallel replica's), or with sequence parallelism, where each holds
// a chunk of the replica's rows, the chunk's part of that mask.
#include "backend/ops.h"
#include "kernels/random.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

namespace {
uint64_t mask_stream(const RunCtx& ctx) { return kernels::splitmix64(ctx.step) + ctx.layer; }
}  // namespace

uint64_t Dropout::mask_offset(const RunCtx& ctx, const Tensor& x) const {
  const uint64_t chunk = tp_.sequence_split() ? uint64_t(ctx.rank) * uint64_t(tp_.size) + uint64_t(tp_.rank)
                                              : uint64_t(ctx.rank);
  return chunk * uint64_t(x.count());
}

Dropout::Dropout(const LayerArgs& args) {
  ArgReader r(args, {"p"});
  p_ = r.real_or("p", 0.5);
  r.finish();
  if (!(p_ >= 0 && p_ < 1)) r.fail("p must be in [0, 1), got " + number_text(p_));
}

std::string Dropout::spec() const { return "dropout(" + number_text(p_) + ")"; }

void Dropout::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  if (ctx.training && p_ > 0)
    backend::dropout_forward(x, p_, ctx.seed, mask_stream(ctx), mask_offset(ctx, x), y);
  else
    backend::copy(x, y);
}

void Dropout::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx,
                       const RunCtx& ctx) {
  if (!dx.defined()) return;
  if (ctx.training && p_ > 0)
    backend::dropout_backward(dy, p_, ctx.seed, mask_stream(ctx), mask_offset(ctx, x), dx);
  else
    backend::copy(dy, dx);
}

}  // namespace hpc::nn
