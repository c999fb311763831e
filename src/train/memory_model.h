// The per-rank memory model: what one rank holds at dist.zero 0, 1, 2 and 3
// — parameters, gradients, optimizer state, stage 3's gather buffers,
// gradient staging, activations — so that a user can pick the stage before
// the job runs. The trainer prints it at start-up; `hpctrain doctor --memory
// RANKS` prints it for a configuration on any number of ranks without
// training. The figures are those the allocation ledger (core/mem_ledger.h)
// counts, and the tests hold the two against each other.
//
// P parameters of b bytes (the model's dtype), S the largest shard
// (dist::shard_bounds), k optimizer state tensors (Adam 2, SGD with momentum
// 1), fp32 master weights and gradients for a 16-bit model:
//   stage 0: P·b parameters, P·b gradients, k·P·4 state
//   stage 1: the state over S
//   stage 2: the gradients over S too (resident pages on a CPU, where the
//            flat buffer stays reserved; on a GPU the shard plus staging
//            buffers of about dist.bucket_mb)
//   stage 3: the parameters over S too, plus the gather buffers and the
//            gradient staging buffers of the unit plan (dist/unit_plan.h);
//            with train.accum_steps > 1 the whole-size local gradient buffer
// and, every stage, the activations of one micro-batch (nn::Model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "nn/model.h"

namespace hpc::train {

struct MemoryRow {
  int stage = 0;
  double params = 0, grads = 0, optimizer = 0, gather = 0, staging = 0, activations = 0;  // bytes
  std::string note;  // why a stage does not apply ("" when it does)
  double total() const { return params + grads + optimizer + gather + staging + activations; }
};

struct MemoryInputs {
  const nn::Model* model = nullptr;  // its layout and activation sizes (it may store nothing)
  double param_bytes = 4;            // bytes of a parameter in the trained dtype (the model may be float32)
  int world = 1;
  int64_t batch = 1;  // per rank, per micro-step
  Device device = Device::CPU;
  int state_tensors = 2;  // optimizer state tensors of the parameters' size
  bool sixteen_bit = false;
  DistConfig dist;
  int64_t accum_steps = 1;
};

// Rows for dist.zero 0, 1, 2 and 3.
std::vector<MemoryRow> memory_model(const MemoryInputs& in);
// The table, one row per stage, `current` marked (-1: none).
std::string memory_table(const std::vector<MemoryRow>& rows, int world, int current);

// The optimizer state tensors the configuration's optimizer keeps per parameter.
int optimizer_state_tensors(const OptimConfig& optim);

// hpctrain doctor --memory RANKS: the configuration's model (its data file decides the task), stored
// nowhere, and its table on `ranks` ranks. Prints; UserError for a bad configuration.
void print_memory_model(const Config& cfg, int ranks);

}  // namespace hpc::train
