// ShardedParams (see sharded_params.h).
#include "dist/sharded_params.h"

#include <algorithm>
#include <string>

#include "backend/ops.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/host_pages.h"
#include "core/mem_ledger.h"
#include "dist/heartbeat.h"
#include "dist/shards.h"

namespace hpc::dist {

ShardedParams::ShardedParams(Communicator& comm, nn::Model& model, std::vector<int64_t> bounds,
                             const Options& options)
    : comm_(comm), model_(model), bounds_(std::move(bounds)), options_(options), plan_(model, options.plan) {
  HPC_ASSERT(bounds_.size() == static_cast<size_t>(comm.size()) + 1 && bounds_.back() == model.num_params(),
             "ZeRO 3: shard bounds do not fit the model");
  HPC_ASSERT(model.grads_lo() == lo() && model.grads().count() == hi() - lo(),
             "ZeRO 3: the model does not store this rank's gradient shard");
  HPC_ASSERT(options_.grads_only ? model.stores_whole_params()
                                 : model.params_lo() == lo() && model.params().count() == hi() - lo(),
             "ZeRO 3: the model does not store this rank's parameter shard");
  const std::vector<Unit>& units = plan_.units();
  if (!options_.grads_only) {
    const MemUseScope use(MemUse::GatherBuffers);
    for (int64_t c : plan_.param_buffers())
      param_buffers_.emplace_back(Shape{c}, model.dtype(), model.device());
  }
  if (options_.whole_grads) {
    const MemUseScope use(MemUse::Grads);
    whole_grads_ = Tensor(Shape{model.num_params()}, model.dtype(), model.device());
  } else {
    const MemUseScope use(MemUse::GradStaging);
    for (int64_t c : plan_.grad_buffers())
      grad_buffers_.emplace_back(Shape{c}, model.dtype(), model.device());
  }
  gathers_.resize(units.size());
  reduces_.resize(units.size());
  occupant_.assign(param_buffers_.size(), -1);
  // Every layer once, for good: a unit always lives in the same buffers (unit_plan.h).
  for (int i = 0; i < model.num_layers(); ++i)
    model.bind_layer(i, [this](const nn::ParamSlot& s) {
      const int u = plan_.unit_at(s.offset);
      const int64_t at = s.offset - plan_.units()[static_cast<size_t>(u)].begin;
      Tensor p =
          options_.grads_only ? model_.params().slice(s.offset, s.shape) : param_view(u).slice(at, s.shape);
      return std::pair{p, grad_view(u).slice(at, s.shape)};
    });
  model.set_param_source(this);
}

ShardedParams::~ShardedParams() { model_.set_param_source(nullptr); }

Tensor ShardedParams::param_view(int u) const {
  const Unit& unit = plan_.units()[static_cast<size_t>(u)];
  return param_buffers_[static_cast<size_t>(unit.param_buffer)].slice(plan_.pad(u), Shape{unit.count()});
}

Tensor ShardedParams::grad_view(int u) const {
  const Unit& unit = plan_.units()[static_cast<size_t>(u)];
  if (options_.whole_grads) return whole_grads_.slice(unit.begin, Shape{unit.count()});
  return grad_buffers_[static_cast<size_t>(unit.grad_buffer)].slice(plan_.pad(u), Shape{unit.count()});
}

int64_t ShardedParams::gather_buffer_bytes() const {
  return options_.grads_only ? 0
                             : plan_.param_buffer_elems() * static_cast<int64_t>(dtype_size(model_.dtype()));
}

int64_t ShardedParams::grad_staging_bytes() const {
  return options_.whole_grads ? 0
                              : plan_.grad_buffer_elems() * static_cast<int64_t>(dtype_size(model_.dtype()));
}

void ShardedParams::before_forward(size_t layer, const nn::RunCtx& ctx) {
  if (options_.grads_only) {  // the parameters are whole; the post-optimizer gather must have reached them
    const int u = plan_.unit_of_layer(static_cast<int>(layer));
    if (u >= 0 && plan_.units()[static_cast<size_t>(u)].first_layer == static_cast<int>(layer))
      wait_params(u);
    return;
  }
  run(plan_.forward(ctx.training).before[layer]);
}

void ShardedParams::after_forward(size_t layer, const nn::RunCtx& ctx) {
  run(plan_.forward(ctx.training).after[layer]);
}

void ShardedParams::before_backward(size_t layer) { run(plan_.backward(reduce_).before[layer]); }

void ShardedParams::after_backward(size_t layer) { run(plan_.backward(reduce_).after[layer]); }

void ShardedParams::begin_backward(bool reduce) { reduce_ = reduce; }

double ShardedParams::finish() {
  const double w0 = reduce_wait_, t0 = monotonic_seconds();
  run(plan_.backward(reduce_).finish);
  const double waited = monotonic_seconds() - t0;
  reduce_wait_ = w0;  // finish's own wait is returned, not counted among backward's
  if (options_.whole_grads && reduce_ && whole_grads_.count() > 0) {
    // The next step accumulates from zero; on the host the pages go back to the OS until then.
    if (whole_grads_.device() == Device::CPU)
      release_zeroed(whole_grads_, 0, whole_grads_.count());
    else
      backend::fill(whole_grads_, 0.0);
  }
  return waited;
}

ShardedParams::Waits ShardedParams::take_waits() {
  const Waits w{gather_wait_, reduce_wait_};
  gather_wait_ = reduce_wait_ = 0;
  return w;
}

void ShardedParams::run(const std::vector<UnitOp>& ops) {
  for (const UnitOp& op : ops) {
    if (plan_.units()[static_cast<size_t>(op.unit)].count() == 0) continue;
    switch (op.kind) {
      case UnitOp::Gather:
        if (!options_.grads_only) gather(op.unit);
        break;
      case UnitOp::Wait:
        if (!options_.grads_only) wait_params(op.unit);
        break;
      case UnitOp::Free:
        if (!options_.grads_only) {
          wait_params(op.unit);  // (always waited already: a gather is never left running into a free buffer)
          occupant_[static_cast<size_t>(plan_.units()[static_cast<size_t>(op.unit)].param_buffer)] = -1;
        }
        break;
      case UnitOp::OpenGrads:
        open_grads(op.unit);
        break;
      case UnitOp::ReduceGrads:
        reduce_grads(op.unit);
        break;
      case UnitOp::SettleGrads:
        settle_grads(op.unit);
        break;
    }
  }
}

void ShardedParams::gather(int u) {
  const Unit& unit = plan_.units()[static_cast<size_t>(u)];
  int& occupant = occupant_[static_cast<size_t>(unit.param_buffer)];
  HPC_ASSERT(occupant < 0, "ZeRO 3: unit " + std::to_string(u) + "'s gather buffer still holds unit " +
                               std::to_string(occupant) + " (the plan and the run disagree)");
  occupant = u;
  const Tensor buf = param_view(u);
  // The own shard's part in place, then every other rank's part received around it.
  const int64_t a = std::max(lo(), unit.begin), b = std::min(hi(), unit.end);
  if (b > a)
    backend::copy(model_.params().slice(a - lo(), Shape{b - a}), buf.slice(a - unit.begin, Shape{b - a}));
  gathers_[static_cast<size_t>(u)] =
      comm_.allgather_shards_async(buf, shard_bounds_within(bounds_, unit.begin, unit.end));
  fault_at(FaultPoint::Allgather);  // test-only: a rank killed while a parameter gather is in flight
}

void ShardedParams::wait_params(int u) {
  std::unique_ptr<Request>& r = gathers_[static_cast<size_t>(u)];
  if (!r) return;
  const double t0 = monotonic_seconds();
  r->wait_on_device();
  r.reset();
  gather_wait_ += monotonic_seconds() - t0;
}

void ShardedParams::open_grads(int u) {
  if (options_.whole_grads) return;  // accumulates across micro-steps; cleared by finish()
  backend::fill(grad_view(u), 0.0);
}

void ShardedParams::reduce_grads(int u) {
  const Unit& unit = plan_.units()[static_cast<size_t>(u)];
  reduces_[static_cast<size_t>(u)] = comm_.reduce_scatter_async(
      grad_view(u), ReduceOp::Avg, shard_bounds_within(bounds_, unit.begin, unit.end));
}

void ShardedParams::settle_grads(int u) {
  std::unique_ptr<Request>& r = reduces_[static_cast<size_t>(u)];
  if (!r) return;
  const double t0 = monotonic_seconds();
  r->wait_on_device();
  r.reset();
  reduce_wait_ += monotonic_seconds() - t0;
  const Unit& unit = plan_.units()[static_cast<size_t>(u)];
  const int64_t a = std::max(lo(), unit.begin), b = std::min(hi(), unit.end);
  if (b > a)
    backend::copy(grad_view(u).slice(a - unit.begin, Shape{b - a}),
                  model_.grads().slice(a - lo(), Shape{b - a}));
}

void ShardedParams::start_param_allgather() {
  HPC_ASSERT(options_.grads_only,
             "start_param_allgather: the parameters are gathered unit by unit in forward");
  for (size_t u = 0; u < plan_.units().size(); ++u) {
    const Unit& unit = plan_.units()[u];
    if (unit.count() == 0) continue;
    gathers_[u] = comm_.allgather_shards_async(model_.params().slice(unit.begin, Shape{unit.count()}),
                                               shard_bounds_within(bounds_, unit.begin, unit.end));
  }
  fault_at(FaultPoint::Allgather);
}

void ShardedParams::finish_param_allgather() {
  for (size_t u = 0; u < gathers_.size(); ++u) wait_params(static_cast<int>(u));
}

bool ShardedParams::param_allgather_pending() const {
  return options_.grads_only &&
         std::any_of(gathers_.begin(), gathers_.end(), [](const auto& r) { return r != nullptr; });
}

}  // namespace hpc::dist
