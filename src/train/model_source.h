// The model that eval, predict, sample and export work from: an hpctrain
// checkpoint (--checkpoint PATH), or weights a user already has
// (--model.init PATH: a Hugging Face directory — config.json and
// model.safetensors or shards — a safetensors file of `export --format
// torch`, or a checkpoint). Either way the result is the model's spec, its
// input shape and its parameters in the model's flat float32 layout, so the
// commands build the model one way whatever the source.
//
// From a Hugging Face directory the spec is config.json's (train/hf_layout.h)
// at --model.context tokens (default: max_position_embeddings, at most
// 2048); a shape config.json and the safetensors disagree on is one line
// naming the tensor and both shapes (exit 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "config/config.h"

namespace hpc::train {

struct ModelSource {
  std::string path;
  std::string what;  // "checkpoint 'PATH'" or "model 'PATH'", for messages
  bool checkpoint = false;
  std::string spec;
  Shape input_shape;
  Tensor params;  // host float32 [num_params], the model's flat layout
  std::vector<ckpt::NamedTensor> buffers;
  int64_t step = 0;
  std::string config_ini;           // a checkpoint's run configuration ("" otherwise)
  int64_t batch_size = 0;           // a checkpoint's batch size (0 otherwise)
  DType dtype = DType::F32;         // the dtype the weights were trained in (a checkpoint) or are stored in
  std::optional<int64_t> bos, eos;  // token ids, where the source says (config.json)
  // The model's tokenizer: the file beside the weights (tokenizer.json or tokenizer.model), or the
  // one hpcdata stored in a checkpoint's training data, when that file is still there ("" when none).
  std::string tokenizer_bytes;
  std::string tokenizer_file;    // its file name in an export ("tokenizer.json" | "tokenizer.model" | …)
  std::string tokenizer_origin;  // where it came from, for messages
  int64_t num_params() const { return params.count(); }
};

// --checkpoint when given, else --model.init. UserError (exit 2) for a
// damaged or unreadable source.
ModelSource load_model_source(const Config& cfg);

// The training precision an INI text of a run configuration names (train.precision), as a dtype.
DType precision_of_ini(const std::string& ini);

// `key = value` of [section] in a run's INI text ("" when absent).
std::string ini_value(const std::string& ini, const std::string& section, const std::string& key);

}  // namespace hpc::train
