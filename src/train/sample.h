// hpctrain sample: text from a language model's checkpoint, so a user can
// see what the model learned.
//
//   hpctrain sample --checkpoint runs/gpt/ckpt-300.h5 --prompt "The " --tokens 200
//                   [--temperature 0.8] [--top-k 40] [--seed 0]
//
// The model is rebuilt from the checkpoint's spec and input shape [T] and
// given its parameters (read and CRC-checked by ckpt::read_checkpoint). The
// prompt's bytes are the first tokens (the byte-level tokenizer of `hpcdata
// pack --from text`); each step runs the full forward pass on the last T
// tokens and draws the next token from the logits at the last real position.
// A shorter sequence sits at the start of the window and the rest is padding:
// the model is causal, so positions after the last real token cannot change
// its logits. No KV cache: fine for a CPU check of a small model.
//
// The draw: logits / temperature, softmax over the top_k largest (ties: the
// lower id), one uniform number per token from the counter-based Rng of
// --seed: the same checkpoint, prompt and seed always give the same text.
// Temperature 0 is greedy. Only ids < 256 can be drawn (bytes; a model with a
// larger vocabulary trained on byte data has never seen the others).
//
// Output: the prompt and the continuation on stdout, nothing else there
// (the settings go to stderr). Bytes are written as they are (UTF-8 text
// the model learned prints as such), except control characters other than
// newline and tab, which are escaped as \xNN so a terminal never gets a
// control sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/rng.h"

namespace hpc::train {

// The whole command; returns the exit code. Errors are one line on stderr
// ("hpctrain: error: …"), exit 2: a missing or damaged checkpoint, one that
// is not a language model, an empty prompt.
int sample_command(const Config& cfg);

// The next token from one position's logits (`vocab` floats), drawing among
// ids < min(vocab, 256). temperature 0: the arg max.
int64_t pick_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, Rng& rng);

// `bytes` made safe for a terminal as described above.
std::string printable(const std::string& bytes);

}  // namespace hpc::train
