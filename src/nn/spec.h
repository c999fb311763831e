// Model specs: the text that describes a network, and the presets.
//
//   conv(32,3,pad=1) bn relu maxpool(2) flatten linear(128) relu linear(10)
//
// A layer is a name with optional arguments in parentheses: positional
// numbers first, then key=value pairs. res(...) is a residual block whose
// arguments are themselves layers. Presets expand to such a text.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "nn/layer.h"

namespace hpc::nn {

// Parses a spec into layer arguments; throws UserError with the position of a syntax error.
std::vector<LayerArgs> parse_spec(const std::string& text);

// The spec text of a preset for a dataset with the given input shape and class count.
// mlp takes its hidden widths from `hidden`. Throws UserError for an unknown preset.
std::string preset_spec(const std::string& preset, const std::vector<int>& hidden, int64_t num_classes);
// The same from the model options: model.preset, and for the gpt presets
// (gpt-tiny, gpt-small, gpt2-124m) model.layers/heads/width/context/vocab
// overriding the preset's values (0 = keep) and model.recompute. For a gpt
// preset num_classes is the data's token count, which must fit in the
// vocabulary. Throws UserError for bad combinations (width not a multiple of
// heads, gpt options with another preset).
std::string preset_spec(const ModelConfig& model, int64_t num_classes);

// The known preset names, for --help and "did you mean".
const std::vector<std::string>& preset_names();

}  // namespace hpc::nn
