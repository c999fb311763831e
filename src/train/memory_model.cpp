// The per-rank memory model (see memory_model.h).
#include "train/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "dist/shards.h"
#include "dist/unit_plan.h"
#include "train/task.h"

namespace hpc::train {

namespace {

constexpr double MIB = 1048576.0;

// The unit plan a stage builds (stage 3: units of zero_unit_mb; stage 2 on a GPU: of a bucket).
dist::UnitPlan plan_for(const MemoryInputs& in, int stage, double bytes) {
  dist::UnitPlan::Options o;
  const double unit_mb = stage == 3 ? in.dist.zero_unit_mb : in.dist.bucket_mb;
  o.unit_elems = static_cast<int64_t>(unit_mb * MIB / bytes);
  o.keep_elems = stage == 3 ? static_cast<int64_t>(in.dist.zero_keep_mb * MIB / bytes) : 0;
  o.align = std::max<int64_t>(1, static_cast<int64_t>(64 / bytes));
  o.prefetch = in.dist.zero_prefetch;
  o.oversize_alone = stage == 2;
  o.unit_option = stage == 3 ? "dist.zero_unit_mb" : "dist.bucket_mb";
  o.bytes_per_elem = bytes;
  return dist::UnitPlan(*in.model, o);
}

}  // namespace

int optimizer_state_tensors(const OptimConfig& optim) {
  if (optim.name == OptimizerKind::Sgd) return optim.momentum != 0 ? 1 : 0;
  return 2;
}

std::vector<MemoryRow> memory_model(const MemoryInputs& in) {
  HPC_ASSERT(in.model != nullptr && in.world >= 1, "memory model: inputs");
  const nn::Model& m = *in.model;
  const double b = in.param_bytes;
  const auto p = static_cast<double>(m.num_params());
  const std::vector<int64_t> bounds = dist::shard_bounds(m.num_params(), in.world);
  int64_t largest = 0;
  for (size_t r = 0; r + 1 < bounds.size(); ++r) largest = std::max(largest, bounds[r + 1] - bounds[r]);
  const auto s = static_cast<double>(largest);
  const bool gpu = in.device == Device::CUDA;
  const double activations =
      static_cast<double>(m.activation_bytes(in.batch).kept) * b / static_cast<double>(dtype_size(m.dtype()));
  std::vector<MemoryRow> rows;
  for (int stage = 0; stage <= 3; ++stage) {
    MemoryRow r;
    r.stage = stage;
    const bool sharded = in.world > 1 && stage > 0;
    const double state_elems = sharded ? s : p;  // what the optimizer steps
    r.optimizer = 4.0 * state_elems * (in.state_tensors + (in.sixteen_bit ? 1 : 0));
    r.params = (sharded && stage == 3 ? s : p) * b;
    r.grads = (sharded && stage >= 2 ? s : p) * b + (in.sixteen_bit ? 4.0 * state_elems : 0.0);
    r.activations = activations;
    if (sharded && stage == 2 && !gpu)
      r.note = "gradients: the resident pages (the buffer stays reserved), plus the buckets in flight";
    try {
      if (sharded && stage == 2 && gpu)
        r.staging = static_cast<double>(plan_for(in, 2, b).grad_buffer_elems()) * b;
      if (sharded && stage == 3) {
        const dist::UnitPlan plan = plan_for(in, 3, b);
        r.gather = static_cast<double>(plan.param_buffer_elems()) * b;
        if (in.accum_steps > 1)
          r.grads += p * b;  // the micro-steps' local gradients, whole (dist/sharded_params.h)
        else
          r.staging = static_cast<double>(plan.grad_buffer_elems()) * b;
      }
    } catch (const UserError& e) {
      r.note = e.what();
    }
    if (stage > 0 && in.world == 1) r.note = "one rank: nothing to shard";
    rows.push_back(r);
  }
  return rows;
}

std::string memory_table(const std::vector<MemoryRow>& rows, int world, int current) {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "memory model per rank (MiB) on %d rank(s):\n", world);
  out += line;
  std::snprintf(line, sizeof line, "  %-6s %10s %10s %10s %10s %10s %11s %10s\n", "zero", "params", "grads",
                "optimizer", "gather", "staging", "activations", "total");
  out += line;
  for (const MemoryRow& r : rows) {
    std::snprintf(line, sizeof line, "  %-6s %10.2f %10.2f %10.2f %10.2f %10.2f %11.2f %10.2f%s%s\n",
                  (std::to_string(r.stage) + (r.stage == current ? " *" : "")).c_str(), r.params / MIB,
                  r.grads / MIB, r.optimizer / MIB, r.gather / MIB, r.staging / MIB, r.activations / MIB,
                  r.total() / MIB, r.note.empty() ? "" : "  ", r.note.c_str());
    out += line;
  }
  return out;
}

void print_memory_model(const Config& cfg, int ranks) {
  if (ranks < 1) throw UserError("option --memory: the number of ranks must be at least 1");
  if (cfg.data.path.empty())
    throw UserError(
        "option --memory: needs --data.path (the data file decides the model's input and output)");
  RunData data = open_run_data(cfg);
  const data::SplitInfo& info = data.train->info();
  const bool gpu = cfg.train.device == DeviceChoice::Cuda;
  const bool sixteen = cfg.train.precision != Precision::Fp32;
  // The layout only: a float32 model that stores nothing (bfloat16 and float16 are GPU dtypes; the
  // table counts their 2 bytes).
  nn::StoredRange nothing;
  nothing.range = [](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; };
  const nn::Model model(data.task.model_layers(cfg.model, info), info.sample_shape, DType::F32,
                        cfg.train.seed, Device::CPU, nothing);
  MemoryInputs in;
  in.model = &model;
  in.param_bytes = sixteen ? 2 : 4;
  in.world = ranks;
  in.batch = cfg.train.batch_size;
  in.device = gpu ? Device::CUDA : Device::CPU;
  in.state_tensors = optimizer_state_tensors(cfg.optim);
  in.sixteen_bit = sixteen;
  in.dist = cfg.dist;
  in.accum_steps = cfg.train.accum_steps * cfg.train.micro_batches;
  const std::vector<MemoryRow> rows = memory_model(in);
  std::printf("model: %s\n%lld parameters; batch %lld per rank, %s, %s%s\n%s", model.spec().c_str(),
              static_cast<long long>(model.num_params()), static_cast<long long>(cfg.train.batch_size),
              gpu ? "GPU" : "CPU", name_of(cfg.train.precision), sixteen ? " (fp32 master weights)" : "",
              memory_table(rows, ranks, cfg.dist.zero).c_str());
}

}  // namespace hpc::train
