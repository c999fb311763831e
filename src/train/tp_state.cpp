// Tensor parallelism in the trainer (see tp_state.h).
#include "train/tp_state.h"

#include <algorithm>
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "dist/heartbeat.h"

namespace hpc::train {

void CommTp::count(int64_t elements, double t0) {
  ++traffic_.calls;
  traffic_.elements += static_cast<double>(elements);
  traffic_.seconds += dist::monotonic_seconds() - t0;
}

void CommTp::sum(const Tensor& t) {
  const double t0 = dist::monotonic_seconds();
  comm_.allreduce_before_compute(t, dist::ReduceOp::Sum);
  count(t.count(), t0);
}

void CommTp::max(const Tensor& t) {
  const double t0 = dist::monotonic_seconds();
  comm_.allreduce_before_compute(t, dist::ReduceOp::Max);
  count(t.count(), t0);
}

void CommTp::gather(const Tensor& part, const Tensor& full) {
  const double t0 = dist::monotonic_seconds();
  comm_.allgather(part.view(Shape{part.count()}), full.view(Shape{full.count()}));
  count(full.count(), t0);
}

// A reduce-scatter of full in place (its other shards are left unspecified), then this rank's shard.
void CommTp::sum_scatter(const Tensor& full, const Tensor& part) {
  const double t0 = dist::monotonic_seconds();
  const int64_t n = part.count();
  std::vector<int64_t> bounds;
  for (int r = 0; r <= comm_.size(); ++r) bounds.push_back(n * r);
  const Tensor flat = full.view(Shape{full.count()});
  comm_.reduce_scatter_async(flat, dist::ReduceOp::Sum, bounds)->wait_on_device();
  backend::copy(flat.slice(n * comm_.rank(), Shape{n}), part.view(Shape{n}));
  count(full.count(), t0);
}

namespace {

void check_flat(const nn::Model& model, const Tensor& local, const Tensor& full) {
  HPC_ASSERT(local.device() == Device::CPU && full.device() == Device::CPU && local.dtype() == full.dtype(),
             "tensor-parallel state: host tensors of one dtype");
  HPC_ASSERT(local.count() == model.num_params() && full.count() == model.num_full_params(),
             "tensor-parallel state: the flat buffers do not fit the model");
}

// The description of this rank's parts, as doubles (exact below 2^53): per parameter its split
// dimension (-1: replicated), the number of pieces, then each piece's local, global and length.
std::vector<double> describe_parts(const nn::Model& model) {
  std::vector<double> out;
  for (const nn::ParamInfo& p : model.param_info()) {
    out.push_back(p.shard.dim);
    out.push_back(static_cast<double>(p.shard.pieces.size()));
    for (const nn::ShardPiece& s : p.shard.pieces)
      out.insert(out.end(), {static_cast<double>(s.local), static_cast<double>(s.global),
                             static_cast<double>(s.length)});
  }
  return out;
}

// Another rank's parts from its description; the unsplit shapes are the same on every rank.
std::vector<nn::ParamShard> parse_parts(const nn::Model& model, const std::vector<double>& d) {
  std::vector<nn::ParamShard> out;
  size_t at = 0;
  for (const nn::ParamInfo& p : model.param_info()) {
    nn::ParamShard s;
    s.full = p.full_shape;
    s.dim = static_cast<int>(d.at(at));
    const auto pieces = static_cast<size_t>(d.at(at + 1));
    at += 2;
    for (size_t k = 0; k < pieces; ++k, at += 3)
      s.pieces.push_back({static_cast<int64_t>(d.at(at)), static_cast<int64_t>(d.at(at + 1)),
                          static_cast<int64_t>(d.at(at + 2))});
    out.push_back(std::move(s));
  }
  HPC_ASSERT(at == d.size(), "tensor-parallel state: a rank described other parameters");
  return out;
}

// full ← local by the given parts (replicated parameters copied whole when `replicated`).
void put_by(const nn::Model& model, const std::vector<nn::ParamShard>& parts, const Tensor& local,
            const Tensor& full, bool replicated) {
  const std::vector<nn::ParamInfo>& info = model.param_info();
  for (size_t i = 0; i < info.size(); ++i) {
    const nn::ParamInfo& p = info[i];
    if (p.tied_copy) continue;  // a pipeline stage's copy: its owner's stage puts the values
    const Tensor dst = full.slice(p.full_offset, p.full_shape);
    if (parts[i].split()) {
      nn::put_shard(local.slice(p.offset, parts[i].local_shape()), parts[i], dst);
    } else if (replicated) {
      backend::copy(local.slice(p.offset, p.shape), dst);
    }
  }
}

// The sum of squares of grads (elements [lo, lo + count) of the layout) over the parameters for
// which `pick` holds, in parameter order.
template <class Pick>
double squares(const nn::Model& model, const Tensor& grads, int64_t lo, Pick pick) {
  const int64_t hi = lo + grads.count();
  double sum = 0;
  for (const nn::ParamInfo& p : model.param_info()) {
    const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.shape.count());
    if (b > a && pick(p)) sum += backend::sum_squares(grads.slice(a - lo, Shape{b - a}));
  }
  return sum;
}

}  // namespace

void put_parts(const nn::Model& model, const Tensor& local, const Tensor& full) {
  check_flat(model, local, full);
  std::vector<nn::ParamShard> mine;
  for (const nn::ParamInfo& p : model.param_info()) mine.push_back(p.shard);
  put_by(model, mine, local, full, true);
}

void take_parts_of(const nn::Model& model, int64_t full_offset, const Tensor& tensor, const Tensor& local) {
  HPC_ASSERT(
      local.count() == model.num_params() && local.dtype() == DType::F32 && tensor.dtype() == DType::F32,
      "take_parts_of: host float32 buffers");
  for (const nn::ParamInfo& p : model.param_info()) {
    if (p.full_offset != full_offset) continue;
    HPC_ASSERT(p.full_shape == tensor.shape(), "take_parts_of: " + p.name + " is not that tensor");
    if (p.shard.split())
      nn::take_shard(tensor, p.shard, local.slice(p.offset, p.shape));
    else
      backend::copy(tensor, local.slice(p.offset, p.shape));
  }
}

Tensor gather_unsplit(const nn::Model& model, const Tensor& local, dist::Communicator& tp) {
  HPC_ASSERT(local.count() == model.num_params() && local.dtype() == DType::F32,
             "gather_unsplit: the whole flat float32 buffer");
  if (tp.rank() != 0) {
    std::vector<double> d = describe_parts(model);
    double n = static_cast<double>(d.size());
    tp.send(Tensor::borrow(&n, Shape{1}, DType::F64), 0);
    tp.send(Tensor::borrow(d.data(), Shape{static_cast<int64_t>(d.size())}, DType::F64), 0);
    tp.send(local, 0);
    return Tensor();
  }
  Tensor full(Shape{model.num_full_params()}, DType::F32);
  put_parts(model, local, full);
  Tensor theirs(Shape{model.num_params()}, DType::F32);
  for (int r = 1; r < tp.size(); ++r) {  // one rank's parts at a time: one extra flat buffer
    double n = 0;
    tp.recv(Tensor::borrow(&n, Shape{1}, DType::F64), r);
    std::vector<double> d(static_cast<size_t>(n));
    tp.recv(Tensor::borrow(d.data(), Shape{static_cast<int64_t>(d.size())}, DType::F64), r);
    tp.recv(theirs, r);
    put_by(model, parse_parts(model, d), theirs, full, false);
  }
  return full;
}

double tp_grad_norm(const nn::Model& model, const Tensor& grads, const Sharding& sharding,
                    dist::Communicator& dp, dist::Communicator& tp) {
  return std::sqrt(tp_grad_squares(model, grads, sharding, dp, tp));
}

double tp_grad_squares(const nn::Model& model, const Tensor& grads, const Sharding& sharding,
                       dist::Communicator& dp, dist::Communicator& tp) {
  // Per data-parallel shard q (train/sharding.h: the same definition for every dist.zero), the
  // squares of the split parameters and of the replicated ones, folded in shard order.
  const std::vector<int64_t>& bounds = sharding.bounds();
  const size_t shards = bounds.size() - 1;
  std::vector<double> parts(2 * shards, 0.0);
  auto part = [&](size_t q, const Tensor& g, int64_t lo) {
    parts[2 * q] =
        squares(model, g, lo, [](const nn::ParamInfo& p) { return p.shard.split() && !p.tied_copy; });
    parts[2 * q + 1] =
        squares(model, g, lo, [](const nn::ParamInfo& p) { return !p.shard.split() && !p.tied_copy; });
  };
  if (sharding.active()) {
    double mine[2];
    part(0, grads, sharding.lo());
    mine[0] = parts[0], mine[1] = parts[1];
    dp.allgather(Tensor::borrow(mine, Shape{2}, DType::F64),
                 Tensor::borrow(parts.data(), Shape{static_cast<int64_t>(parts.size())}, DType::F64));
  } else {
    for (size_t q = 0; q < shards; ++q)
      part(q, grads.slice(bounds[q], Shape{bounds[q + 1] - bounds[q]}), bounds[q]);
  }
  double sum[2] = {parts[0], parts[1]};
  for (size_t q = 1; q < shards; ++q) sum[0] += parts[2 * q], sum[1] += parts[2 * q + 1];
  tp.allreduce(Tensor::borrow(sum, Shape{1}, DType::F64), dist::ReduceOp::Sum);  // the split parts
  return sum[0] + sum[1];
}

void sum_partial_grads(const nn::Model& model, const Tensor& grads, int64_t lo, dist::Communicator& tp) {
  const int64_t hi = lo + grads.count();
  for (const nn::ParamInfo& p : model.param_info()) {
    const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.shape.count());
    if (b > a && p.tp_partial) tp.allreduce(grads.slice(a - lo, Shape{b - a}), dist::ReduceOp::Sum);
  }
}

}  // namespace hpc::train
