// What a run learns, decided once from what the data file holds: a
// classifier (/train/y class ids), a regression (/train/y float targets), or
// a language model (/train/tokens, cut into windows of `context` tokens).
//
// Every decision that depends on it lives here, so the trainer asks the Task
// instead of testing "is this a language model" wherever it matters: which
// Dataset opens a split, the model spec and the check of its output shape,
// the loss, the unit of throughput (samples or tokens) and the evaluation
// lines and records (accuracy and top-5, or loss per token and perplexity).
//
// A language model's window length is model.context, else the T of the
// spec's embed(vocab, width, T) layer: the spec is parsed once, here, and the
// model is built from the parsed layers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "data/h5_dataset.h"
#include "nn/layer.h"
#include "nn/loss.h"
#include "train/metrics.h"

namespace hpc::train {

struct RunData;

// A finished evaluation, summed over every rank.
struct EvalResult {
  double loss = 0, acc = 0, top5 = -1;  // top5 < 0: not applicable (fewer than 10 classes)
  int64_t count = 0;                    // samples; a language model: tokens
};

class Task {
 public:
  enum class Kind { Classification, Regression, LanguageModel };

  Kind kind() const { return kind_; }
  bool language_model() const { return kind_ == Kind::LanguageModel; }
  int64_t context() const { return context_; }  // tokens per window; 0 unless a language model

  // The layers of the model to build for the training split `train` (x/y data:
  // the preset sized for its classes or targets; token data: the parsed spec,
  // its vocabulary checked against the data's).
  std::vector<nn::LayerArgs> model_layers(const ModelConfig& model, const data::SplitInfo& train) const;
  // UserError unless a model with output shape `out` (no batch) fits the data.
  void check_output(const Shape& out, const data::SplitInfo& train) const;
  // train.loss resolved against the data (auto: ce for class ids, mse for
  // targets); UserError for ce on targets or mse on class ids.
  std::unique_ptr<nn::Loss> make_loss(const TrainConfig& train, const data::SplitInfo& info) const;

  // Throughput: "samples/s" or "tokens/s" in the step table; the loss counts
  // items_per_sample() items per sample (a window's tokens, else 1).
  const char* throughput_unit() const { return language_model() ? "tokens/s" : "samples/s"; }
  double items_per_sample() const { return language_model() ? static_cast<double>(context_) : 1.0; }
  const char* sample_word() const { return language_model() ? "windows" : "samples"; }

  // Whether an evaluation of `split` counts top-5 accuracy: a classifier of ten or more
  // classes (with fewer, top-5 says little; EvalResult::top5 stays < 0).
  bool counts_top5(const data::SplitInfo& split) const {
    return split.classification && split.num_classes >= 10;
  }

  // "eval  epoch E step S: val_loss …" (with perplexity for a language model).
  std::string eval_line(int64_t epoch, int64_t step, const EvalResult& r) const;
  // The evaluation record of metrics.jsonl: val_loss, val_acc, val_top5 / val_ppl.
  Record eval_record(int64_t epoch, int64_t step, const EvalResult& r) const;
  // "final: val_loss …  (N validation samples)"; `split_word` names the split evaluated.
  std::string final_line(const EvalResult& r, const char* split_word = "validation") const;

 private:
  friend RunData open_run_data(const Config& cfg);

  Kind kind_ = Kind::Classification;
  int64_t context_ = 0;
  std::vector<nn::LayerArgs> lm_layers_;  // a language model's parsed spec
  std::string lm_spec_name_;              // "preset gpt-tiny" or "spec", for messages
};

// The task and the data of a run: the training split of cfg.data.path and,
// when there is one, the validation split (of data.val_path when set).
struct RunData {
  Task task;
  std::unique_ptr<data::Dataset> train, val;  // val: null without a validation split
};

// Opens the data and decides the task from what the file holds. UserError
// (one line) when the data and the model options do not fit: a gpt preset
// on x/y data, token data for a model without an embed layer (and no
// model.context), a validation split unlike the training split.
RunData open_run_data(const Config& cfg);

}  // namespace hpc::train
