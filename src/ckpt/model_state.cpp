// Model/optimizer ⇄ Checkpoint, and choosing the checkpoint to resume from.
#include "ckpt/model_state.h"

#include "backend/ops.h"
#include "ckpt/store.h"
#include "core/error.h"

namespace hpc::ckpt {

Tensor host_f32(const Tensor& t) {
  Tensor f32 = t;
  if (t.dtype() != DType::F32) {
    f32 = Tensor(t.shape(), DType::F32, t.device());
    backend::convert(t, f32);
  }
  Tensor out =
      t.device() == Device::CPU ? Tensor(t.shape(), DType::F32) : Tensor::pinned(t.shape(), DType::F32);
  if (t.count() > 0) backend::copy(f32, out);
  return out;
}

void assign(const Tensor& dst, const Tensor& src, const std::string& name) {
  HPC_ASSERT(dst.count() == src.count() && src.dtype() == DType::F32 && src.device() == Device::CPU,
             "restoring " + name + ": size mismatch");
  const Tensor from = src.view(dst.shape());
  if (dst.dtype() == DType::F32) return backend::copy(from, dst);
  Tensor f32(dst.shape(), DType::F32, dst.device());
  backend::copy(from, f32);
  backend::convert(f32, dst);
}

namespace {

// host_f32(t), written into `reuse` when that is a host float32 tensor of t's size
// (the previous snapshot's memory: already touched, so a snapshot is one copy); with
// Snapshot::Borrow, t itself when it is host float32 already.
Tensor host_f32_into(const Tensor& t, const Tensor& reuse, Snapshot how = Snapshot::Copy) {
  if (how == Snapshot::Borrow && t.dtype() == DType::F32 && t.device() == Device::CPU) return t;
  if (t.dtype() != DType::F32 || !reuse.defined() || reuse.dtype() != DType::F32 ||
      reuse.device() != Device::CPU || reuse.count() != t.count())
    return host_f32(t);
  Tensor out = reuse.view(t.shape());
  backend::copy(t, out);
  return out;
}

std::vector<NamedTensor> capture_named(const std::vector<std::pair<std::string, Tensor>>& from,
                                       std::vector<NamedTensor> previous, Snapshot how = Snapshot::Copy) {
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < from.size(); ++i) {
    const auto& [name, t] = from[i];
    const bool same = i < previous.size() && previous[i].name == name;
    out.push_back({name, host_f32_into(t, same ? previous[i].value : Tensor(), how)});
  }
  return out;
}

const NamedTensor& find(const std::vector<NamedTensor>& v, const std::string& name) {
  for (const NamedTensor& t : v)
    if (t.name == name) return t;
  throw Error(EXIT_INTERNAL, "internal error: checkpoint has no '" + name + "' (validated before restore)");
}

}  // namespace

namespace {

// The file's entries: the unsplit model's names, offsets and shapes (the same as the model's when
// it is not split over a tensor-parallel group).
void capture_entries(const nn::Model& model, Checkpoint& c) {
  c.spec = model.spec();
  c.input_shape = model.input_shape();
  c.param_entries.clear();
  for (const nn::ParamInfo& p : model.param_info())
    c.param_entries.push_back({p.name, p.full_offset, p.full_shape});
}

}  // namespace

void capture(const Tensor& params, nn::Model& model, optim::Optimizer& optimizer, Checkpoint& c,
             Snapshot how) {
  HPC_ASSERT(params.count() == model.num_params() && model.num_params() == model.num_full_params(),
             "checkpoint: the parameter buffer does not fit the model");
  capture_entries(model, c);
  c.params = host_f32_into(params, c.params, how).view(Shape{params.count()});
  c.buffers = capture_named(model.buffers(), std::move(c.buffers), how);
  c.optimizer_state = capture_named(optimizer.state(), std::move(c.optimizer_state), how);
  c.optimizer_steps = optimizer.steps_taken();
}

void capture_unsplit(const Tensor& params, nn::Model& model, std::vector<NamedTensor> state,
                     int64_t optimizer_steps, Checkpoint& c) {
  HPC_ASSERT(params.count() == model.num_full_params() && params.device() == Device::CPU &&
                 params.dtype() == DType::F32,
             "checkpoint: not the unsplit model's parameters");
  capture_entries(model, c);
  c.params = params;
  c.buffers = capture_named(model.buffers(), std::move(c.buffers));
  c.optimizer_state = std::move(state);
  c.optimizer_steps = optimizer_steps;
}

void capture_layout(nn::Model& model, optim::Optimizer& optimizer, Checkpoint& c) {
  HPC_ASSERT(model.num_params() == model.num_full_params(), "checkpoint: streamed from a split model");
  capture_entries(model, c);
  c.params = Tensor();
  c.streamed_count = model.num_params();
  c.buffers = capture_named(model.buffers(), std::move(c.buffers));
  c.optimizer_state.clear();
  for (const auto& [name, t] : optimizer.state()) c.optimizer_state.push_back({name, Tensor()});
  c.optimizer_steps = optimizer.steps_taken();
}

void capture_shard(const Tensor& params, optim::Optimizer& optimizer, const std::vector<int64_t>& bounds,
                   int rank, ShardSnapshot& s, Snapshot how) {
  const int64_t lo = bounds[static_cast<size_t>(rank)], hi = bounds[static_cast<size_t>(rank) + 1];
  auto range = [&](const Tensor& t, const Tensor& reuse) {
    const Tensor flat = t.view(Shape{t.count()});
    HPC_ASSERT(t.count() == bounds.back() || t.count() == hi - lo,
               "checkpoint: a state tensor is neither whole nor this rank's shard");
    return host_f32_into(t.count() == bounds.back() ? flat.slice(lo, Shape{hi - lo}) : flat, reuse, how);
  };
  s.bounds = bounds;
  s.rank = rank;
  s.params = range(params, s.params);
  std::vector<NamedTensor> state;
  const auto from = optimizer.state();
  for (size_t i = 0; i < from.size(); ++i)
    state.push_back({from[i].first, range(from[i].second, i < s.state.size() ? s.state[i].value : Tensor())});
  s.state = std::move(state);
}

void restore_buffers(const Checkpoint& c, nn::Model& model) {
  for (auto& [name, t] : model.buffers()) assign(t, find(c.buffers, name).value, name);
}

const Tensor& optimizer_state_of(const Checkpoint& c, const std::string& name) {
  return find(c.optimizer_state, name).value;
}

size_t flat_dataset_of(const Checkpoint& c, const std::string& name) {
  return 1 + static_cast<size_t>(&find(c.optimizer_state, name) - c.optimizer_state.data());
}

void restore(const Checkpoint& c, const Tensor& params, nn::Model& model, optim::Optimizer& optimizer) {
  assign(params, c.params, "parameters");
  for (auto& [name, t] : model.buffers()) assign(t, find(c.buffers, name).value, name);
  for (auto& [name, t] : optimizer.state()) assign(t, find(c.optimizer_state, name).value, name);
  optimizer.set_steps_taken(c.optimizer_steps);
}

RunLayout layout_of(nn::Model& model, optim::Optimizer& optimizer, const std::string& optimizer_name) {
  RunLayout run;
  run.spec = model.spec();
  run.input_shape = model.input_shape();
  run.num_params = model.num_full_params();  // the unsplit model's, what a file holds
  for (auto& [name, t] : model.buffers()) run.buffers.emplace_back(name, t.count());
  run.optimizer = optimizer_name;
  for (auto& [name, t] : optimizer.state()) run.optimizer_state.push_back(name);
  return run;
}

std::optional<Resume> locate_resume(const std::string& resume, const std::string& run_dir,
                                    std::vector<std::string>& log, FlatData flat) {
  if (resume.empty()) return std::nullopt;
  std::optional<Resume> found;
  if (resume != "auto") {
    found = Resume{read_checkpoint(resume, flat), resume, nullptr};
  } else {
    Found newest = find_newest_valid(run_dir, flat);
    for (const std::string& s : newest.skipped) log.push_back("skipping a damaged checkpoint: " + s);
    if (!newest.checkpoint) {
      if (!newest.skipped.empty())
        throw UserError("--resume auto: " + run_dir + " holds " + std::to_string(newest.skipped.size()) +
                        " checkpoint(s) and none is readable (first: " + newest.skipped.front() +
                        "); move them away to start over");
      return std::nullopt;
    }
    found = Resume{std::move(*newest.checkpoint), newest.path, nullptr};
  }
  if (flat == FlatData::Verify) {
    std::vector<std::string> states;
    for (const NamedTensor& s : found->checkpoint.optimizer_state) states.push_back(s.name);
    found->flat = std::make_unique<FlatFileSource>(found->path, found->checkpoint.num_params(), states);
  }
  return found;
}

}  // namespace hpc::ckpt
