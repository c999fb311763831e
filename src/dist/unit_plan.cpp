// The stage-3 unit plan (see unit_plan.h).
#include "dist/unit_plan.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "core/error.h"

namespace hpc::dist {

const char* unit_op_name(UnitOp::Kind k) {
  switch (k) {
    case UnitOp::Gather:
      return "gather";
    case UnitOp::Wait:
      return "wait";
    case UnitOp::Free:
      return "free";
    case UnitOp::OpenGrads:
      return "open-grads";
    case UnitOp::ReduceGrads:
      return "reduce-grads";
    case UnitOp::SettleGrads:
      return "settle-grads";
  }
  return "?";
}

namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g MiB", bytes / 1048576.0);
  return buf;
}

// Holds on units while the programs are written (see unit_plan.h): a unit is resident while
// anything holds it, and every hold on a unit holds its dependencies too.
class HoldTracker {
 public:
  explicit HoldTracker(const std::vector<Unit>& units)
      : units_(units),
        holds_(units.size(), 0),
        resident_(units.size(), false),
        waited_(units.size(), false) {}

  void hold(int u, std::vector<UnitOp>& out) {
    for (int w : with_deps(u))
      if (holds_[static_cast<size_t>(w)]++ == 0 && !resident_[static_cast<size_t>(w)]) {
        resident_[static_cast<size_t>(w)] = true;
        waited_[static_cast<size_t>(w)] = false;
        out.push_back({UnitOp::Gather, w});
      }
  }
  void release(int u, std::vector<UnitOp>& out) {
    for (int w : with_deps(u)) {
      HPC_ASSERT(holds_[static_cast<size_t>(w)] > 0, "unit plan: a release without a hold");
      if (--holds_[static_cast<size_t>(w)] == 0) {
        resident_[static_cast<size_t>(w)] = false;
        out.push_back({UnitOp::Free, w});
      }
    }
  }
  void wait(int u, std::vector<UnitOp>& out) {
    for (int w : with_deps(u))
      if (!waited_[static_cast<size_t>(w)]) {
        waited_[static_cast<size_t>(w)] = true;
        out.push_back({UnitOp::Wait, w});
      }
  }
  bool idle() const {
    return std::all_of(holds_.begin(), holds_.end(), [](int h) { return h == 0; });
  }

 private:
  std::vector<int> with_deps(int u) const {
    std::vector<int> all{u};
    const std::vector<int>& d = units_[static_cast<size_t>(u)].deps;
    all.insert(all.end(), d.begin(), d.end());
    return all;
  }
  const std::vector<Unit>& units_;
  std::vector<int> holds_;
  std::vector<bool> resident_, waited_;
};

UnitProgram empty_program(int layers) {
  UnitProgram p;
  p.before.assign(static_cast<size_t>(layers), {});
  p.after.assign(static_cast<size_t>(layers), {});
  return p;
}

void write_forward(const std::vector<Unit>& units, bool training, bool prefetch, HoldTracker& h,
                   UnitProgram& p) {
  const int n = static_cast<int>(units.size());
  std::vector<bool> prefetched(units.size(), false);
  for (int u = 0; u < n; ++u) {
    const Unit& unit = units[static_cast<size_t>(u)];
    std::vector<UnitOp>& before = p.before[static_cast<size_t>(unit.first_layer)];
    if (!prefetched[static_cast<size_t>(u)]) h.hold(u, before);
    h.wait(u, before);
    if (prefetch && u + 1 < n) {
      h.hold(u + 1, before);
      prefetched[static_cast<size_t>(u) + 1] = true;
    }
    std::vector<UnitOp>& after = p.after[static_cast<size_t>(unit.end_layer) - 1];
    if (training && unit.kept) h.hold(u, after);
    h.release(u, after);
  }
}

void write_backward(const std::vector<Unit>& units, bool reduce, bool prefetch, HoldTracker& h,
                    UnitProgram& p) {
  const int n = static_cast<int>(units.size());
  // The lowest unit whose backward writes v's gradients: after it, they are final.
  std::vector<int> last_writer(units.size(), n);
  for (int u = 0; u < n; ++u)
    for (int v : units[static_cast<size_t>(u)].writes)
      last_writer[static_cast<size_t>(v)] = std::min(last_writer[static_cast<size_t>(v)], u);
  std::vector<bool> prefetched(units.size(), false), open(units.size(), false);
  std::vector<int> in_flight;
  for (int u = n - 1; u >= 0; --u) {
    const Unit& unit = units[static_cast<size_t>(u)];
    std::vector<UnitOp>& before = p.before[static_cast<size_t>(unit.end_layer) - 1];
    if (!prefetched[static_cast<size_t>(u)]) h.hold(u, before);
    h.wait(u, before);
    for (int v : unit.writes)
      if (!open[static_cast<size_t>(v)]) {
        open[static_cast<size_t>(v)] = true;
        before.push_back({UnitOp::OpenGrads, v});
      }
    if (prefetch && u > 0) {
      h.hold(u - 1, before);
      prefetched[static_cast<size_t>(u) - 1] = true;
    }
    std::vector<UnitOp>& after = p.after[static_cast<size_t>(unit.first_layer)];
    h.release(u, after);
    if (unit.kept) h.release(u, after);
    if (!reduce) continue;
    for (int v : in_flight) after.push_back({UnitOp::SettleGrads, v});
    in_flight.clear();
    for (int v = 0; v < n; ++v)
      if (last_writer[static_cast<size_t>(v)] == u) {
        after.push_back({UnitOp::ReduceGrads, v});
        in_flight.push_back(v);
      }
  }
  for (int v : in_flight) p.finish.push_back({UnitOp::SettleGrads, v});
  HPC_ASSERT(h.idle(), "unit plan: a unit is still held after backward");
}

// Which units are ever resident (or staged) together while `passes` run, in order.
struct Overlaps {
  std::vector<std::set<int>> params, grads;
  int64_t peak = 0;
};

// The programs' operations in the order they run: a forward's layers ascending, a backward's descending.
template <typename F>
void for_each_op(const UnitProgram& p, F&& f) {
  const size_t n = p.before.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = p.reverse ? n - 1 - k : k;
    for (const UnitOp& op : p.before[i]) f(op);
    for (const UnitOp& op : p.after[i]) f(op);
  }
  for (const UnitOp& op : p.finish) f(op);
}

void walk(const std::vector<Unit>& units, const std::vector<const UnitProgram*>& passes, Overlaps& o) {
  std::set<int> resident, staged;
  int64_t now = 0;
  auto add = [](int u, std::set<int>& live, std::vector<std::set<int>>& pairs) {
    for (int w : live) {
      pairs[static_cast<size_t>(u)].insert(w);
      pairs[static_cast<size_t>(w)].insert(u);
    }
    live.insert(u);
  };
  for (const UnitProgram* p : passes)
    for_each_op(*p, [&](const UnitOp& op) {
      const int64_t count = units[static_cast<size_t>(op.unit)].count();
      switch (op.kind) {
        case UnitOp::Gather:
          add(op.unit, resident, o.params);
          now += count;
          o.peak = std::max(o.peak, now);
          break;
        case UnitOp::Free:
          resident.erase(op.unit);
          now -= count;
          break;
        case UnitOp::OpenGrads:
          add(op.unit, staged, o.grads);
          break;
        case UnitOp::SettleGrads:
          staged.erase(op.unit);
          break;
        default:
          break;
      }
    });
}

// Buffers for units that overlap, largest unit first; a unit takes the smallest existing buffer that
// none of the units already in it overlaps, or a new one. Returns the capacities.
std::vector<int64_t> share_buffers(std::vector<Unit>& units, const std::vector<std::set<int>>& overlaps,
                                   int64_t align, int Unit::*buffer) {
  std::vector<int> order;
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u].count() > 0) order.push_back(static_cast<int>(u));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return units[static_cast<size_t>(a)].count() > units[static_cast<size_t>(b)].count();
  });
  std::vector<int64_t> capacity;
  std::vector<std::vector<int>> members;
  for (int u : order) {
    Unit& unit = units[static_cast<size_t>(u)];
    const int64_t need = unit.begin % align + unit.count();
    int best = -1;
    for (size_t b = 0; b < capacity.size(); ++b) {
      const bool clash = std::any_of(members[b].begin(), members[b].end(),
                                     [&](int w) { return overlaps[static_cast<size_t>(u)].count(w) > 0; });
      if (!clash && (best < 0 || capacity[b] < capacity[static_cast<size_t>(best)]))
        best = static_cast<int>(b);
    }
    if (best < 0) {
      best = static_cast<int>(capacity.size());
      capacity.push_back(0);
      members.emplace_back();
    }
    capacity[static_cast<size_t>(best)] = std::max(capacity[static_cast<size_t>(best)], need);
    members[static_cast<size_t>(best)].push_back(u);
    unit.*buffer = best;
  }
  return capacity;
}

}  // namespace

UnitPlan::UnitPlan(const nn::Model& model, const Options& options) : options_(options) {
  HPC_ASSERT(options_.align >= 1, "unit plan: alignment");
  build_units(model);
  build_programs();
  assign_buffers();
}

void UnitPlan::build_units(const nn::Model& model) {
  num_layers_ = model.num_layers();
  unit_of_layer_.assign(static_cast<size_t>(num_layers_), -1);
  if (model.num_params() == 0) return;
  const int64_t limit = options_.unit_elems;
  for (int i = 0; i < num_layers_; ++i) {
    const int64_t own = model.layer_end(i) - model.layer_begin(i);
    if (limit > 0 && own > limit && !options_.oversize_alone) {
      const nn::ParamInfo* largest = nullptr;
      for (const nn::ParamInfo& p : model.param_info())
        if (p.layer == i && (largest == nullptr || p.shape.count() > largest->shape.count())) largest = &p;
      const double b = options_.bytes_per_elem;
      HPC_ASSERT(largest != nullptr, "a layer with parameters has no largest tensor");
      throw UserError(options_.unit_option + " is smaller than layer " + std::to_string(i) + " " +
                      model.layer_spec(i) + " (" + mib(static_cast<double>(own) * b) +
                      " of parameters; its largest tensor " + largest->name + " " + largest->shape.str() +
                      " is " + mib(static_cast<double>(largest->shape.count()) * b) +
                      "): a layer is gathered whole, so a unit must hold it; raise it to at least " +
                      mib(static_cast<double>(own) * b) + " or set 0 (a unit per layer)");
    }
    const bool start = units_.empty() || (own > 0 && units_.back().count() > 0 &&
                                          (limit == 0 || units_.back().count() + own > limit));
    if (start) units_.push_back({i, i, model.layer_begin(i), model.layer_begin(i), {}, {}, false, -1, -1});
    Unit& u = units_.back();
    u.end_layer = i + 1;
    u.end = model.layer_end(i);
    unit_of_layer_[static_cast<size_t>(i)] = static_cast<int>(units_.size()) - 1;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    std::set<int> deps;
    for (int i = unit.first_layer; i < unit.end_layer; ++i)
      for (const nn::ParamSlot& s : model.layer_params(i))
        if (const int w = unit_at(s.offset); w != static_cast<int>(u)) deps.insert(w);
    unit.deps.assign(deps.begin(), deps.end());
    unit.writes = {static_cast<int>(u)};
    unit.writes.insert(unit.writes.end(), unit.deps.begin(), unit.deps.end());
    unit.kept = unit.count() <= options_.keep_elems || u + 1 == units_.size();
  }
}

int UnitPlan::unit_at(int64_t offset) const {
  auto it = std::upper_bound(units_.begin(), units_.end(), offset,
                             [](int64_t x, const Unit& u) { return x < u.begin; });
  HPC_ASSERT(it != units_.begin(), "unit plan: an offset before the first unit");
  const int u = static_cast<int>(it - units_.begin()) - 1;
  HPC_ASSERT(offset < units_[static_cast<size_t>(u)].end || units_[static_cast<size_t>(u)].count() == 0,
             "unit plan: an offset past the last unit");
  return u;
}

void UnitPlan::build_programs() {
  train_forward_ = empty_program(num_layers_);
  eval_forward_ = empty_program(num_layers_);
  reduce_backward_ = empty_program(num_layers_);
  accumulate_backward_ = empty_program(num_layers_);
  reduce_backward_.reverse = accumulate_backward_.reverse = true;
  if (units_.empty()) return;
  HoldTracker train(units_), eval(units_);
  write_forward(units_, true, options_.prefetch, train, train_forward_);
  HoldTracker accumulate = train;  // both backward programs continue from a training forward
  write_backward(units_, true, options_.prefetch, train, reduce_backward_);
  write_backward(units_, false, options_.prefetch, accumulate, accumulate_backward_);
  write_forward(units_, false, options_.prefetch, eval, eval_forward_);
  HPC_ASSERT(eval.idle(), "unit plan: a unit is still held after an evaluation forward");
}

void UnitPlan::assign_buffers() {
  Overlaps o;
  o.params.resize(units_.size());
  o.grads.resize(units_.size());
  walk(units_, {&train_forward_, &reduce_backward_}, o);
  peak_resident_ = o.peak;
  // Accumulating, the gradients go into a whole-size buffer, not staging buffers: only the parameters count.
  Overlaps accumulating;
  accumulating.params = std::move(o.params);
  accumulating.grads.resize(units_.size());
  walk(units_, {&train_forward_, &accumulate_backward_}, accumulating);
  o.params = std::move(accumulating.params);
  walk(units_, {&eval_forward_}, o);
  param_buffers_ = share_buffers(units_, o.params, options_.align, &Unit::param_buffer);
  grad_buffers_ = share_buffers(units_, o.grads, options_.align, &Unit::grad_buffer);
}

int64_t UnitPlan::param_buffer_elems() const {
  int64_t n = 0;
  for (int64_t c : param_buffers_) n += c;
  return n;
}

int64_t UnitPlan::grad_buffer_elems() const {
  int64_t n = 0;
  for (int64_t c : grad_buffers_) n += c;
  return n;
}

std::string UnitPlan::describe() const {
  std::string out;
  char line[200];
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    std::string deps;
    for (int d : unit.deps) deps += (deps.empty() ? ", reads unit " : ", ") + std::to_string(d);
    std::snprintf(line, sizeof line, "  unit %zu: layers %d-%d, %lld parameters, buffers %d/%d%s%s\n", u,
                  unit.first_layer, unit.end_layer - 1, static_cast<long long>(unit.count()),
                  unit.param_buffer, unit.grad_buffer, unit.kept ? ", kept for backward" : "", deps.c_str());
    out += line;
  }
  return out;
}

}  // namespace hpc::dist
