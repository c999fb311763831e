// The one evaluation pass: the trainer's per-epoch evaluation and `hpctrain
// eval` / `predict` all run this function, so a checkpoint evaluated later
// gives bitwise the numbers its training run printed.
//
// Exact on any number of ranks, and the same bits on every number of ranks:
// the split is cut into batches of `rows` CONSECUTIVE samples in file order
// (batch k = samples [k·rows, (k+1)·rows), the last one shorter and padded
// with masked rows), and rank r evaluates batches r, r+W, r+2W, … . A batch
// therefore has the same content and size whatever W is, so its forward pass
// and its sums are the same bits; each batch's sums go into their own slot of
// a [batches × 4] table that one Sum allreduce fills (every slot has exactly
// one non-zero contribution, so the reduction adds only zeros), and the
// table is then added up in batch order on every rank. Every sample is
// evaluated exactly once, no padding duplicates. Only `rows` (the training
// batch size, from the checkpoint) has to match for the bits to match.
//
// Classification also yields the confusion matrix (true class × predicted
// class, counts; the prediction is the arg max with ties to the lower class,
// the rule of the loss's top-1), from which per-class accuracy follows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "train/batch_upload.h"
#include "train/task.h"

namespace hpc::train {

// What one pass needs; the trainer and the eval command fill it from their own set-up.
struct EvalInputs {
  const data::Dataset* split = nullptr;
  nn::Model* model = nullptr;
  nn::Loss* loss = nullptr;
  BatchUpload* upload = nullptr;
  data::Loader* loader = nullptr;  // built for `rows`-sample batches of `split`
  dist::Communicator* comm = nullptr;
  int64_t rows = 0;
  uint64_t seed = 0;
  bool top5 = false;  // count top-5 hits (classification with >= 10 classes)
  // Every rank runs as many forward passes as the rank with the most batches (a rank without a batch
  // of its own runs one on zeros and drops it): ZeRO 3's forward gathers parameters collectively.
  bool lockstep = false;
  nn::TpComm* tp = nullptr;  // a model split over a tensor-parallel group: its collectives
  // A pipeline stage's piece (dist.pp > 1): runs a batch through this stage (receiving its input
  // from the stage before, sending its output on) and returns the logits on the last stage, null
  // on the others; the batches' sums then add over `stages` too (the other stages add zeros).
  std::function<const Tensor*(const Tensor& x, const nn::RunCtx& rc)> stage_forward;
  dist::Communicator* stages = nullptr;
};

// Classification detail, summed over every rank.
struct EvalDetail {
  int64_t classes = 0;
  std::vector<int64_t> confusion;     // classes × classes, [true][predicted]
  double class_acc(int64_t c) const;  // -1 for a class without samples
};

// Called for each batch this rank evaluated: its index k, the real rows
// (the first `valid` of `logits`), the logits as float32 on the host.
using BatchSink = std::function<void(int64_t batch, int64_t valid, const Tensor& host_logits)>;

// Number of batches of `rows` samples in a split of `n`.
inline int64_t eval_batches(int64_t n, int64_t rows) { return (n + rows - 1) / rows; }

// The pass (every rank calls it; collectives inside). `detail` (classification)
// and `sink` are optional.
EvalResult evaluate_split(const EvalInputs& in, EvalDetail* detail = nullptr, const BatchSink& sink = {});

}  // namespace hpc::train
