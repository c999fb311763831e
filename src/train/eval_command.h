// hpctrain eval / predict: a checkpoint against a data file, on 1…N ranks.
//
//   hpctrain eval    --checkpoint runs/a/ckpt-375.h5 --data.path val.h5 [--eval.split val|train] [--out F]
//   hpctrain predict --checkpoint runs/a/ckpt-375.h5 --data.path new.h5 --out preds.h5
//
// The model is rebuilt from the checkpoint's spec and input shape and given
// its parameters and buffers; the run's own configuration (stored in the
// checkpoint) supplies everything that changes the numbers: the loss and its
// label smoothing, the batch size, the seed, a language model's window. The
// data file's /train decides the task as in training; then the split (auto:
// /val when there is one, else /train) runs through evaluate_split, the
// trainer's own evaluation pass: the numbers equal the training run's final
// evaluation of the same split bitwise, on any number of ranks.
//
// eval prints loss, accuracy, top-5 and per-class accuracy (language models:
// loss per token and perplexity) and writes eval.json (val_loss, val_acc,
// val_top5, per_class_acc — accuracies as fractions in [0, 1] — confusion;
// val_ppl for language models) to --out,
// by default beside the checkpoint, atomically (temp + rename).
//
// predict writes, for every sample of the split in file order: classifiers
// /probs (N × k float32 softmax) and /pred (N int32 arg max), regression
// models /output (N × k float32), language models /logits (N × T × V); all
// models' raw outputs also as /logits. The file appears complete or not at
// all (PATH.tmp-PID, then rename). Batches are gathered to rank 0 round by
// round (one allgather of W batches), so no rank holds more than its share.
//
// Bad input is one line and exit 2 on every rank: a damaged checkpoint, data
// whose sample shape or class count does not fit the model, a missing split.
#pragma once

#include <memory>

#include "config/config.h"
#include "dist/context.h"

namespace hpc::train {

class EvalSession;

// Set-up (every rank; UserError on bad input) and the run, split so that
// main.cpp can agree on set-up failures before any collective of the run.
class EvalCommand {
 public:
  EvalCommand(const Config& cfg, dist::Context& ctx);
  ~EvalCommand();
  int run();  // eval or predict; returns the exit code

 private:
  std::unique_ptr<EvalSession> s_;
};

}  // namespace hpc::train
