// The run's task and its data (see task.h).
#include "train/task.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/augment.h"
#include "data/image_dataset.h"
#include "data/token_dataset.h"
#include "nn/spec.h"
#include "train/model_init.h"

namespace hpc::train {

namespace {

// A language model's spec: model.spec, else a language-model preset, else
// the config.json of a Hugging Face directory given as model.init, else the
// preset (which then is no language model, and the data says so).
std::string lm_spec_text(const ModelConfig& m) {
  if (!m.spec.empty()) return m.spec;
  if (!nn::is_language_preset(m.preset) && !m.init.empty()) {
    std::string from_init = hf_init_spec(m.init, m.context);
    if (!from_init.empty()) return from_init;
  }
  return nn::preset_spec(m, 0);
}

std::string model_name(const ModelConfig& m) {
  if (!m.spec.empty()) return "spec";
  if (!nn::is_language_preset(m.preset) && !hf_init_spec(m.init, m.context).empty())
    return "of " + m.init + "/config.json";
  return "preset " + m.preset;
}

void check_validation_split(const data::Dataset& train, const data::Dataset& val) {
  const data::SplitInfo &t = train.info(), &v = val.info();
  if (v.classification && v.num_classes > t.num_classes)
    throw UserError(val.path() + ": /val/y has " + std::to_string(v.num_classes) +
                    " classes but /train/y has " + std::to_string(t.num_classes));
  if (v.sample_shape != t.sample_shape)
    throw UserError(val.path() + ": /val/x samples are " + v.sample_shape.str() + " but /train/x are " +
                    t.sample_shape.str());
}

}  // namespace

RunData open_run_data(const Config& cfg) {
  RunData d;
  Task& task = d.task;
  const std::string& path = cfg.data.path;
  const std::string val_path = cfg.data.val_path.empty() ? path : cfg.data.val_path;
  const data::OpenOptions open{cfg.data.check == DataCheck::Full, true};
  if (data::TokenDataset::is_token_file(path)) {
    // A language model: windows of `context` tokens; everything after this works per window.
    const ModelConfig& m = cfg.model;
    task.kind_ = Task::Kind::LanguageModel;
    task.lm_spec_name_ = model_name(m);
    // The data's vocabulary is not known yet: the preset is made without its check (model_layers has it).
    task.lm_layers_ = nn::parse_spec(lm_spec_text(m));
    task.context_ = m.context > 0 ? m.context : nn::spec_context(task.lm_layers_);
    if (task.context_ == 0)
      throw UserError("the data file holds tokens (/train/tokens) but model " + task.lm_spec_name_ +
                      " is not a language model (no embed(vocab, width, context) layer): use --model.preset "
                      "gpt-tiny, llama-tiny or another language-model preset, or set --model.context");
    d.train = std::make_unique<data::TokenDataset>(path, "train", task.context_, open);
    if (data::H5Dataset::has_split(val_path, "val"))
      d.val = std::make_unique<data::TokenDataset>(val_path, "val", task.context_, open);
  } else {
    if (cfg.model.spec.empty() && nn::is_language_preset(cfg.model.preset))
      throw UserError(
          "model.preset " + cfg.model.preset + " is a language model, but data file '" + path +
          "' holds no /train/tokens: make one with `hpcdata pack --from text FILE... -o text.h5`");
    if (data::ImageDataset::is_image_file(path)) {
      // Encoded images: decoded to random_resized_crop's size, else the file's.
      const int64_t side = data::parse_augment(cfg.data.augment).resized_crop;
      d.train = std::make_unique<data::ImageDataset>(path, "train", side, open);
      if (data::ImageDataset::has_split(val_path, "val"))
        d.val = std::make_unique<data::ImageDataset>(val_path, "val", d.train->info().sample_shape[1], open);
    } else {
      d.train = std::make_unique<data::H5Dataset>(path, "train", open);
      if (data::H5Dataset::has_split(val_path, "val"))
        d.val = std::make_unique<data::H5Dataset>(val_path, "val", open);
    }
    task.kind_ = d.train->info().classification ? Task::Kind::Classification : Task::Kind::Regression;
  }
  if (d.val) check_validation_split(*d.train, *d.val);
  return d;
}

std::vector<nn::LayerArgs> Task::model_layers(const ModelConfig& model, const data::SplitInfo& train) const {
  if (!language_model()) {
    const int64_t outputs = kind_ == Kind::Classification ? train.num_classes : train.target_shape.count();
    return nn::parse_spec(model.spec.empty() ? nn::preset_spec(model, outputs) : model.spec);
  }
  if (model.spec
          .empty()) {  // the preset's (or config.json's) vocabulary must hold every token id of the data
    const int64_t vocab = static_cast<int64_t>(lm_layers_.front().positional.at(0));
    if (train.num_classes > vocab)
      throw UserError("the data has " + std::to_string(train.num_classes) + " token ids but model.vocab is " +
                      std::to_string(vocab) + " (" + lm_spec_name_ + "): set --model.vocab " +
                      std::to_string(train.num_classes) + " or more");
  }
  return lm_layers_;
}

void Task::check_output(const Shape& out, const data::SplitInfo& train) const {
  if (language_model()) {
    if (out.rank() != 2 || out[0] != context_ || out[1] < train.num_classes)
      throw UserError("model spec: a language model must give logits [context, vocab] = [" +
                      std::to_string(context_) + ", >= " + std::to_string(train.num_classes) +
                      "] per window, but the last layer gives " + out.str());
    return;
  }
  const bool classes = kind_ == Kind::Classification;
  const int64_t outputs = classes ? train.num_classes : train.target_shape.count();
  if (out.count() != outputs)
    throw UserError("model spec: the last layer gives " + out.str() + " outputs but the data has " +
                    std::to_string(outputs) + (classes ? " classes" : " targets") +
                    ": end the spec with linear(" + std::to_string(outputs) + ")");
}

std::unique_ptr<nn::Loss> Task::make_loss(const TrainConfig& train, const data::SplitInfo& info) const {
  const LossKind loss = train.loss != LossKind::Auto ? train.loss
                        : info.classification        ? LossKind::CrossEntropy
                                                     : LossKind::Mse;
  if (loss == LossKind::CrossEntropy && !info.classification)
    throw UserError("--train.loss ce needs integer class labels, but /train/y holds float targets");
  if (loss == LossKind::Mse && info.classification)
    throw UserError("--train.loss mse needs float targets, but /train/y holds class labels");
  return loss == LossKind::CrossEntropy ? nn::make_cross_entropy(train.label_smoothing) : nn::make_mse();
}

std::string Task::eval_line(int64_t epoch, int64_t step, const EvalResult& r) const {
  char line[200];
  const auto e = static_cast<long long>(epoch), s = static_cast<long long>(step);
  if (language_model())
    std::snprintf(line, sizeof line,
                  "eval  epoch %lld step %lld: val_loss %.4f per token  val_acc %.2f%%  perplexity %.3f", e,
                  s, r.loss, 100 * r.acc, std::exp(r.loss));
  else if (r.top5 >= 0)
    std::snprintf(line, sizeof line,
                  "eval  epoch %lld step %lld: val_loss %.4f  val_acc %.2f%%  val_top5 %.2f%%", e, s, r.loss,
                  100 * r.acc, 100 * r.top5);
  else
    std::snprintf(line, sizeof line, "eval  epoch %lld step %lld: val_loss %.4f  val_acc %.2f%%", e, s,
                  r.loss, 100 * r.acc);
  return line;
}

Record Task::eval_record(int64_t epoch, int64_t step, const EvalResult& r) const {
  Record rec;
  rec.add_int("step", step).add_int("epoch", epoch).add("val_loss", r.loss).add("val_acc", r.acc);
  if (r.top5 >= 0) rec.add("val_top5", r.top5);
  if (language_model()) rec.add("val_ppl", std::exp(r.loss));
  return rec;
}

std::string Task::final_line(const EvalResult& r, const char* split_word) const {
  char part[96];
  std::snprintf(part, sizeof part, "final: val_loss %.4f  val_acc %.2f%%", r.loss, 100 * r.acc);
  std::string line = part;
  if (r.top5 >= 0) std::snprintf(part, sizeof part, "  val_top5 %.2f%%", 100 * r.top5), line += part;
  if (language_model()) std::snprintf(part, sizeof part, "  perplexity %.3f", std::exp(r.loss)), line += part;
  std::snprintf(part, sizeof part, "  (%lld %s %s)", static_cast<long long>(r.count), split_word,
                language_model() ? "tokens" : "samples");
  return line + part;
}

}  // namespace hpc::train
