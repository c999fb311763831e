// Model specs: the text that describes a network, and the presets.
//
//   conv(32,3,pad=1) bn relu maxpool(2) flatten linear(128) relu linear(10)
//
// A layer is a name with optional arguments in parentheses: positional
// numbers first, then key=value pairs. res(...) is a residual block whose
// arguments are themselves layers. Presets expand to such a text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/layer.h"

namespace hpc::nn {

// A preset and its shape options (the model.* options of the same names).
struct PresetOptions {
  std::string preset = "cnn";  // simplenet | mlp | lenet5 | cnn | resnet20 | resnet50 | gpt-… | llama-…
  std::vector<int> hidden = {512, 512};  // mlp widths
  // Language-model presets (gpt-tiny | gpt-small | gpt2-124m | llama-tiny |
  // llama-small | tinyllama-1.1b | llama3.2-1b): 0 means "the preset's value".
  int64_t layers = 0;      // transformer blocks
  int64_t heads = 0;       // attention heads per block (width % heads == 0)
  int64_t kv_heads = 0;    // key/value heads (heads % kv_heads == 0; 1: multi-query)
  int64_t width = 0;       // embedding width; resnet50: the first stage's width (64)
  int64_t ffn = 0;         // MLP width (GPT: 4·width; Llama: the preset's)
  int64_t context = 0;     // tokens per training window
  int64_t vocab = 0;       // vocabulary size (256 for the byte-level tokenizer)
  bool recompute = false;  // recompute block activations in backward (gradient checkpointing)
  // resnet presets: each residual branch's last bn starts with gamma = 0 (torchvision's zero_init_residual).
  bool zero_init_residual = false;
};

// Parses a spec into layer arguments; throws UserError with the position of a syntax error.
std::vector<LayerArgs> parse_spec(const std::string& text);

// The spec text of a preset for a dataset with the given input shape and class count.
// mlp takes its hidden widths from `hidden`. Throws UserError for an unknown preset.
std::string preset_spec(const std::string& preset, const std::vector<int>& hidden, int64_t num_classes);
// The same from the preset options: for the language-model presets
// layers/heads/kv_heads/width/ffn/context/vocab override the preset's values
// (0 = keep), and recompute; resnet50 takes width (its first stage's, 64 by
// default) and both resnets zero_init_residual. For a language-model preset
// num_classes is the data's token count, which must fit in the vocabulary.
// Throws UserError for bad combinations (width not a multiple of heads, heads
// not of kv_heads, language-model options with another preset).
std::string preset_spec(const PresetOptions& model, int64_t num_classes);

// A language model's tokens per window: the T of the spec's
// embed(vocab, width, T) layer; 0 when the spec has none (not a language model).
int64_t spec_context(const std::vector<LayerArgs>& layers);

// Whether `preset` names a language model (the gpt and llama presets).
bool is_language_preset(const std::string& preset);

// The known preset names, for --help and "did you mean".
const std::vector<std::string>& preset_names();

}  // namespace hpc::nn
