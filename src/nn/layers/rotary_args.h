// The rotary arguments shared by the specs of attn and llama_block:
// theta (0: none), and one position scaling — linear=F, or
// llama3=F,low=L,high=H,orig=N (config.json's rope_scaling of type "llama3":
// factor, low_freq_factor, high_freq_factor, original_max_position_embeddings).
#pragma once

#include <string>

#include "nn/layers/layer_util.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

// Reads theta (default_theta when absent) and the scaling; fails on bad combinations.
RotaryConfig read_rotary(ArgReader& r, double default_theta);
// ",theta=…,llama3=…" for what differs from the defaults ("" when nothing does).
std::string rotary_text(const RotaryConfig& c, double default_theta);

}  // namespace hpc::nn
