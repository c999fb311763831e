// The cut of a model's layers into pipeline stages (dist.pp = P), each stage
// holding V model chunks (dist.pp_virtual) for the interleaved schedule.
//
// The layers are cut into P·V contiguous pieces; piece k goes to stage k mod P
// as its chunk k div P (virtual stage k, pipeline_schedule.h). A model with
// transformer blocks is cut only before a block: the embedding stays with the
// first block and the final norm and head with the last, so every stage but
// the first and last is a run of whole blocks. Balanced cuts minimise the
// largest piece's forward FLOPs (the embedding and the head count: the head
// of a small-vocabulary-heavy model is often the costliest layer), which sets
// the pipeline's pace; the activation bytes are summed for the start-up lines.
// An explicit dist.pp_split lists the blocks of each piece instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc::train {

struct LayerCost {
  std::string name;             // "embed", "block", "ln_f", "head" ... for the start-up lines
  double flops = 0;             // forward FLOPs of one micro-batch
  double activation_bytes = 0;  // activations kept for the backward, one micro-batch
  std::int64_t parameters = 0;
  bool is_block = false;
};

struct StagePiece {
  int stage = 0;
  int chunk = 0;
  int first = 0;  // [first, last) layer range
  int last = 0;
  int blocks = 0;
  double flops = 0;
  double activation_bytes = 0;
  std::int64_t parameters = 0;
};

struct StagePartition {
  int stages = 1;
  int chunks = 1;
  std::vector<StagePiece> pieces;  // in virtual-stage order: pieces[chunk·P + stage]
  double total_flops = 0;

  const StagePiece& piece(int stage, int chunk) const {
    return pieces[static_cast<size_t>(chunk) * static_cast<size_t>(stages) + static_cast<size_t>(stage)];
  }
  double stage_flops(int stage) const;
};

// Cut minimising the largest piece's FLOPs. UserError when the model has
// fewer blocks (layers, for a model without blocks) than P·V.
StagePartition partition_balanced(const std::vector<LayerCost>& layers, int stages, int chunks);

// Cut by dist.pp_split ("3,3,3,3": blocks per piece, P·V numbers in
// virtual-stage order). UserError naming the numbers when they do not sum to
// the model's blocks, leave a piece empty, or are not P·V of them.
StagePartition partition_explicit(const std::vector<LayerCost>& layers, const std::string& pp_split,
                                  int stages, int chunks);

// One line per stage: "stage 0: layers 0–3 (embed, 3 blocks), 1.2 M
// parameters, est. 31% of a step" (the share of the model's FLOPs).
std::vector<std::string> describe_stages(const StagePartition& partition,
                                         const std::vector<LayerCost>& layers);

}  // namespace hpc::train
