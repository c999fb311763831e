// hpctrain sample: text from a language model, so a user can see what it
// learned or what published weights do.
//
//   hpctrain sample --checkpoint runs/gpt/ckpt-300.h5 --prompt "The " --tokens 200
//   hpctrain sample --model.init ~/TinyLlama-1.1B --prompt "The " [--temperature 0.8] [--top-k 40]
//                   [--seed 0] [--stop true] [--kv-cache true]
//
// The model comes from a checkpoint or from weights one has
// (train/model_source.h). Text becomes tokens through the model's tokenizer
// (hpc::text::Tokenizer): the one beside config.json (tokenizer.json /
// tokenizer.model), or the one `hpcdata pack --tokenizer` stored in a
// checkpoint's training data; without one, a prompt is its bytes (the
// byte-level packing of `hpcdata pack --from text`) and only ids < 256 are
// drawn. The decoded text is printed as it grows. A known beginning-of-text
// token starts the sequence; with --stop (the default) the end-of-text token
// ends it.
//
// With the key/value cache (the default) the prompt goes through the model
// once (Model::decode), then each new token alone: every layer keeps the
// keys and values of the positions before. Without it, each token costs a
// full forward over the window. Both see the same window: the model's
// context T; when a sequence fills it, the window restarts on its last T/2
// tokens (the cache is rebuilt from them), so the two modes compute the same
// logits up to float rounding.
//
// The draw: logits / temperature, softmax over the top_k largest (ties: the
// lower id), one uniform number per token from the counter-based Rng of
// --seed: the same model, prompt and seed always give the same text.
// Temperature 0 is greedy.
//
// Output: the prompt and the continuation on stdout, nothing else there
// (the settings go to stderr). Text is written as it decodes (UTF-8 the model
// learned prints as such), except control characters other than newline and
// tab, which are escaped as \xNN so a terminal never gets a control sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/rng.h"

namespace hpc::train {

// The whole command; returns the exit code. Errors are one line on stderr
// ("hpctrain: error: …"), exit 2: a missing or damaged model, one that is
// not a language model, an empty prompt without a beginning-of-text token, a
// prompt token past the model's vocabulary.
int sample_command(const Config& cfg);

// The next token from one position's logits (`vocab` floats), drawing among
// ids < min(vocab, limit). temperature 0: the arg max.
int64_t pick_token(const float* logits, int64_t vocab, int64_t limit, double temperature, int64_t top_k,
                   Rng& rng);

// `bytes` made safe for a terminal as described above.
std::string printable(const std::string& bytes);

}  // namespace hpc::train
