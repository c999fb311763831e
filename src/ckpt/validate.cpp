// Resume compatibility checks (see validate.h).
#include "ckpt/validate.h"

#include <algorithm>

#include "core/error.h"

namespace hpc::ckpt {

namespace {

std::string batch_text(int64_t global, int64_t per_rank, int64_t world, int64_t accum) {
  return std::to_string(global) + " (" + std::to_string(per_rank) + " per rank × " + std::to_string(world) +
         " rank(s) × " + std::to_string(accum) + " accumulation)";
}

}  // namespace

std::vector<std::string> check_resumable(const Checkpoint& c, const std::string& path, const RunLayout& run) {
  const std::string what = "checkpoint '" + path + "'";
  if (c.spec != run.spec)
    throw UserError(what + " is for another model: its spec is \"" + c.spec + "\", this run's is \"" +
                    run.spec + "\" (resume with the same model.spec/model.preset, or use another run.dir)");
  if (c.input_shape != run.input_shape)
    throw UserError(what + " is for inputs of " + c.input_shape.str() + ", this data has " +
                    run.input_shape.str());
  if (c.num_params() != run.num_params)
    throw UserError(what + " has " + std::to_string(c.num_params()) + " parameters, this model has " +
                    std::to_string(run.num_params));
  std::vector<std::pair<std::string, int64_t>> have;
  for (const NamedTensor& b : c.buffers) have.emplace_back(b.name, b.value.count());
  auto want = run.buffers;
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  if (have != want)
    throw UserError(what + " has " + std::to_string(have.size()) +
                    " model buffers (BatchNorm statistics) that do "
                    "not match this model's " +
                    std::to_string(want.size()));
  if (c.optimizer != run.optimizer)
    throw UserError(what + " was trained with optim.name " + c.optimizer + ", this run uses " +
                    run.optimizer + " (its optimizer state would not fit)");
  for (const std::string& s : run.optimizer_state)
    if (std::none_of(c.optimizer_state.begin(), c.optimizer_state.end(),
                     [&](const NamedTensor& t) { return t.name == s; }))
      throw UserError(what + " has no optimizer state '" + s + "' for " + run.optimizer +
                      " (was it saved with other optimizer settings, e.g. optim.momentum 0?)");
  if (c.global_batch != run.global_batch && !run.allow_reshard)
    throw UserError(what + " was trained with a global batch of " +
                    batch_text(c.global_batch, c.batch_size, c.world_size, c.accum_steps) +
                    ", this run's is " +
                    batch_text(run.global_batch, run.batch_size, run.world_size, run.accum_steps) +
                    ": keep the global batch (train.batch_size × ranks × train.accum_steps) or set "
                    "ckpt.allow_reshard=true to continue with another one (not bit-exact)");

  std::vector<std::string> notes;
  if (c.global_batch != run.global_batch)
    notes.push_back("the global batch changes from " + std::to_string(c.global_batch) + " to " +
                    std::to_string(run.global_batch) +
                    " (ckpt.allow_reshard): the position is carried over in "
                    "samples; results are not bit-identical to an uninterrupted run");
  else if (c.world_size != run.world_size)
    notes.push_back("resuming on " + std::to_string(run.world_size) + " rank(s) a run saved on " +
                    std::to_string(c.world_size) + ": the same global batches, equal to float rounding");
  if (c.seed != run.seed)
    notes.push_back("train.seed is " + std::to_string(run.seed) + " but the checkpoint's run used " +
                    std::to_string(c.seed) + ": the data order and dropout masks change from here on");
  if (c.train_samples != run.train_samples)
    notes.push_back("the training set has " + std::to_string(run.train_samples) +
                    " samples, the checkpoint's had " + std::to_string(c.train_samples));
  return notes;
}

int64_t resume_step(const Checkpoint& c, const RunLayout& run) {
  if (c.global_batch == run.global_batch || run.steps_per_epoch <= 0 || run.global_batch <= 0) return c.step;
  // In 128 bits: the reader bounds each counter by 2^53, so no product overflows; a
  // position past the last step of a run saturates instead of wrapping.
  using Wide = __int128;
  const Wide samples_in_epoch = Wide(c.step_in_epoch) * c.global_batch;
  const Wide position = (samples_in_epoch + run.global_batch - 1) / run.global_batch;
  const Wide step = Wide(c.epoch) * run.steps_per_epoch + std::min<Wide>(position, run.steps_per_epoch);
  return step > INT64_MAX ? INT64_MAX : static_cast<int64_t>(step);
}

}  // namespace hpc::ckpt
