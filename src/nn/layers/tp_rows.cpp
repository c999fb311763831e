// The collectives around a pair of split projections (transformer_pieces.h,
// TpRows): all-reduce or, with sequence parallelism, all-gather before the
// column-split projection and reduce-scatter after the row-split one. Every
// reduction is the group's (RunCtx::tp): the same bits on every rank.
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

TpComm& TpRows::comm(const RunCtx& ctx) const {
  HPC_ASSERT(ctx.tp != nullptr && ctx.tp->size() == tp_.size && ctx.tp->rank() == tp_.rank,
             "a split layer needs RunCtx::tp, the group it was built for");
  return *ctx.tp;
}

Tensor TpRows::in(const Tensor& x, const RunCtx& ctx) {
  if (!tp_.sequence_split()) return x;
  Tensor rows = scratch(x_, rows_of(x), x.dtype(), x.device());
  comm(ctx).gather(x, rows);
  return rows;
}

Tensor TpRows::kept_in(const Tensor& x) const {
  if (!tp_.sequence_split()) return x;
  HPC_ASSERT(x_.defined() && x_.count() >= rows_of(x).count(), "split layer: backward before forward");
  return x_.slice(0, rows_of(x));
}

Tensor TpRows::out(const Tensor& y) {
  return tp_.sequence_split() ? scratch(y_, rows_of(y), y.dtype(), y.device()) : y;
}

void TpRows::reduce_output(const Tensor& y, const RunCtx& ctx) {
  if (!tp_.active()) return;
  if (tp_.sequence_split())
    comm(ctx).sum_scatter(y_.slice(0, rows_of(y)), y);
  else
    comm(ctx).sum(y);
}

Tensor TpRows::out_grad(const Tensor& dy, const RunCtx& ctx) {
  if (!tp_.sequence_split()) return dy;
  Tensor rows = scratch(dy_, rows_of(dy), dy.dtype(), dy.device());
  comm(ctx).gather(dy, rows);
  return rows;
}

Tensor TpRows::in_grad(const Tensor& dx) {
  return tp_.sequence_split() ? scratch(dx_, rows_of(dx), dx.dtype(), dx.device()) : dx;
}

void TpRows::reduce_input_grad(const Tensor& dx, const RunCtx& ctx) {
  if (!tp_.active()) return;
  if (tp_.sequence_split())
    comm(ctx).sum_scatter(dx_.slice(0, rows_of(dx)), dx);
  else
    comm(ctx).sum(dx);
}

}  // namespace hpc::nn
