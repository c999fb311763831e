// The one Optimizer implementation behind Optimizer::create: all three rules
// share the same flat state layout and differ only in the backend rule and in
// which state buffers exist, so one class with a rule tag is simpler than three.
//
// At construction the decay ranges become a partition of the whole buffer
// into segments that alternate between "decay" and "no decay"; step() makes
// one backend::optim_update call per segment.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/ops.h"
#include "core/error.h"

namespace hpc::optim {

namespace {

struct Segment {
  int64_t offset, count;
  bool decay;
};

void require(bool ok, const std::string& msg) {
  if (!ok) throw UserError(msg);
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

backend::OptimHyper hyper_from(const OptimConfig& cfg) {
  backend::OptimHyper h;
  switch (cfg.name) {
    case OptimizerKind::Sgd:
      h.rule = backend::OptimRule::SGD;
      break;
    case OptimizerKind::Adam:
      h.rule = backend::OptimRule::ADAM;
      break;
    case OptimizerKind::AdamW:
      h.rule = backend::OptimRule::ADAMW;
      break;
  }

  require(std::isfinite(cfg.weight_decay) && cfg.weight_decay >= 0,
          "optim.weight_decay must be ≥ 0, got " + num(cfg.weight_decay));
  h.weight_decay = cfg.weight_decay;
  if (h.rule == backend::OptimRule::SGD) {
    require(std::isfinite(cfg.momentum) && cfg.momentum >= 0,
            "optim.momentum must be ≥ 0, got " + num(cfg.momentum));
    require(!cfg.nesterov || cfg.momentum > 0, "optim.nesterov needs optim.momentum > 0");
    h.momentum = cfg.momentum;
    h.nesterov = cfg.nesterov;
  } else {
    require(cfg.beta1 >= 0 && cfg.beta1 < 1, "optim.beta1 must be in [0, 1), got " + num(cfg.beta1));
    require(cfg.beta2 >= 0 && cfg.beta2 < 1, "optim.beta2 must be in [0, 1), got " + num(cfg.beta2));
    require(std::isfinite(cfg.eps) && cfg.eps >= 0, "optim.eps must be ≥ 0, got " + num(cfg.eps));
    h.beta1 = cfg.beta1;
    h.beta2 = cfg.beta2;
    h.eps = cfg.eps;
  }
  return h;
}

// Partition [0, total) into alternating decay / no-decay segments.
std::vector<Segment> segments_from(std::vector<DecayRange> ranges, int64_t total, bool any_decay) {
  if (!any_decay) return {{0, total, false}};
  for (const auto& r : ranges)
    HPC_ASSERT(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= total,
               "decay range [" + std::to_string(r.offset) + ", +" + std::to_string(r.count) +
                   ") outside the parameter buffer of " + std::to_string(total));
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  std::vector<Segment> out;
  int64_t cursor = 0;
  auto add = [&](int64_t begin, int64_t end, bool decay) {
    if (end <= begin) return;
    if (!out.empty() && out.back().decay == decay)
      out.back().count += end - begin;
    else
      out.push_back({begin, end - begin, decay});
  };
  for (const auto& r : ranges) {
    if (r.count == 0) continue;
    HPC_ASSERT(r.offset >= cursor, "decay ranges overlap at element " + std::to_string(r.offset));
    add(cursor, r.offset, false);
    add(r.offset, r.offset + r.count, true);
    cursor = r.offset + r.count;
  }
  add(cursor, total, false);
  return out;
}

class FlatOptimizer final : public Optimizer {
 public:
  FlatOptimizer(const backend::OptimHyper& hyper, const Tensor& params, std::vector<DecayRange> ranges)
      : hyper_(hyper),
        segments_(segments_from(std::move(ranges), params.count(), hyper.weight_decay > 0)),
        count_(params.count()) {
    HPC_ASSERT(
        params.dtype() == DType::F32 || params.dtype() == DType::F64,
        std::string("optimizer: parameters must be float32 or float64, not ") + dtype_name(params.dtype()));
    const Shape flat{count_};
    if (hyper_.rule == backend::OptimRule::SGD) {
      if (hyper_.momentum != 0)
        state_.emplace_back("momentum", Tensor(flat, params.dtype(), params.device()));
    } else {
      state_.emplace_back("exp_avg", Tensor(flat, params.dtype(), params.device()));
      state_.emplace_back("exp_avg_sq", Tensor(flat, params.dtype(), params.device()));
    }
  }

  void step(const Tensor& params, const Tensor& grads, double lr) override {
    HPC_ASSERT(params.count() == count_ && grads.count() == count_,
               "optimizer: buffers of " + std::to_string(params.count()) + " / " +
                   std::to_string(grads.count()) + " elements, state of " + std::to_string(count_));
    HPC_ASSERT(std::isfinite(lr) && lr >= 0, "optimizer: learning rate " + num(lr));
    backend::OptimHyper h = hyper_;
    h.lr = lr;
    h.step = steps_taken_ + 1;
    const Tensor a = state_.empty() ? Tensor() : state_[0].second;
    const Tensor b = state_.size() < 2 ? Tensor() : state_[1].second;
    for (const auto& s : segments_) backend::optim_update(h, s.decay, params, grads, a, b, s.offset, s.count);
    ++steps_taken_;
  }

  std::vector<std::pair<std::string, Tensor>> state() override { return state_; }

 private:
  backend::OptimHyper hyper_;
  std::vector<Segment> segments_;
  int64_t count_;
  std::vector<std::pair<std::string, Tensor>> state_;
};

}  // namespace

std::vector<DecayRange> decay_ranges_of(const std::vector<nn::ParamInfo>& params) {
  std::vector<DecayRange> out;
  for (const auto& p : params)
    if (p.weight_decay) out.push_back({p.offset, p.shape.count()});
  return out;
}

std::vector<DecayRange> decay_ranges_in(const std::vector<DecayRange>& ranges, int64_t lo, int64_t hi) {
  std::vector<DecayRange> out;
  for (const DecayRange& r : ranges) {
    const int64_t a = std::max(r.offset, lo), b = std::min(r.offset + r.count, hi);
    if (b > a) out.push_back({a - lo, b - a});
  }
  return out;
}

std::unique_ptr<Optimizer> Optimizer::create(const OptimConfig& cfg, const Tensor& params,
                                             std::vector<DecayRange> decay_ranges) {
  return std::make_unique<FlatOptimizer>(hyper_from(cfg), params, std::move(decay_ranges));
}

void Optimizer::set_steps_taken(int64_t steps) {
  if (steps < 0) throw UserError("optimizer step counter must be ≥ 0, got " + std::to_string(steps));
  steps_taken_ = steps;
}

double clip_grad_norm(const Tensor& grads, double max_norm) {
  const double norm = std::sqrt(backend::sum_squares(grads));
  clip_to_norm(grads, norm, max_norm);
  return norm;
}

void clip_to_norm(const Tensor& grads, double norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm && grads.count() > 0)
    backend::scale(grads, max_norm / (norm + 1e-6));
}

}  // namespace hpc::optim
