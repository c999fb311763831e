// hpctrain sample (see sample.h): checkpoint → model → autoregressive draws.
#include "train/sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "backend/cpu/threads.h"
#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "nn/model.h"

namespace hpc::train {

namespace {

constexpr int64_t BYTE_VOCAB = 256;  // the tokens that decode to text (byte-level tokenizer)

// The model of checkpoint `c`, with its parameters and buffers; throws
// UserError when it is not a language model ([T] token ids → [T, V] logits).
std::unique_ptr<nn::Model> load_language_model(const ckpt::Checkpoint& c, const std::string& path) {
  const std::string what = "checkpoint '" + path + "'";
  auto model = std::make_unique<nn::Model>(c.spec, c.input_shape, DType::F32, 0, Device::CPU);
  const Shape& in = model->input_shape();
  const Shape& out = model->output_shape();
  if (in.rank() != 1 || out.rank() != 2 || out[0] != in[0])
    throw UserError(what + " holds a model for inputs " + in.str() + " → " + out.str() +
                    ", not a language model (token windows [T] → logits [T, vocab]); sample needs one "
                    "trained on text, e.g. --model.preset gpt-tiny on `hpcdata pack --from text` data");
  if (c.num_params() != model->num_params())
    throw UserError(what + ": " + std::to_string(c.num_params()) +
                    " parameters stored but its model spec has " + std::to_string(model->num_params()));
  backend::copy(c.params.view(model->params().shape()), model->params());
  for (auto& [name, t] : model->buffers()) {
    auto it =
        std::find_if(c.buffers.begin(), c.buffers.end(), [&n = name](const auto& b) { return b.name == n; });
    if (it == c.buffers.end() || it->value.count() != t.count())
      throw UserError(what + ": buffer '" + name + "' is missing or has the wrong size");
    backend::copy(it->value.view(t.shape()), t);
  }
  return model;
}

}  // namespace

int64_t pick_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, Rng& rng) {
  const int64_t n = std::min(vocab, BYTE_VOCAB);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  // Most likely first; equal logits keep the lower id first, so the order is a function of the logits.
  auto more_likely = [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (a < b && logits[a] == logits[b]);
  };
  const int64_t k = top_k > 0 ? std::min(top_k, n) : n;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), more_likely);
  if (temperature <= 0) return ids[0];
  // Softmax of logits / temperature over the k candidates, in double, shifted by the largest.
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[static_cast<size_t>(i)] =
        std::exp((double(logits[ids[static_cast<size_t>(i)]]) - logits[ids[0]]) / temperature);
    sum += p[static_cast<size_t>(i)];
  }
  const double u = rng.uniform() * sum;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += p[static_cast<size_t>(i)];
    if (u < acc) return ids[static_cast<size_t>(i)];
  }
  return ids[static_cast<size_t>(k - 1)];  // u == sum up to rounding
}

std::string printable(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (unsigned char b : bytes) {
    if (b == '\n' || b == '\t' || (b >= 0x20 && b != 0x7f)) {
      out += static_cast<char>(b);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", b);
      out += esc;
    }
  }
  return out;
}

int sample_command(const Config& cfg) {
  try {
    const SampleConfig& sc = cfg.sample;
    if (sc.prompt.empty())
      throw UserError(
          "option --prompt: give the text to continue (at least one byte; the byte-level tokenizer has no "
          "start-of-text token)");
    backend::cpu::configure_threads(1);  // one process: every core to OpenBLAS
    const ckpt::Checkpoint c = ckpt::read_checkpoint(cfg.checkpoint);
    std::unique_ptr<nn::Model> model = load_language_model(c, cfg.checkpoint);
    const int64_t t = model->input_shape()[0], vocab = model->output_shape()[1];

    std::vector<int64_t> tokens;
    for (unsigned char b : sc.prompt) {
      if (b >= vocab)
        throw UserError("option --prompt: byte " + std::to_string(b) +
                        " is outside the model's vocabulary of " + std::to_string(vocab) + " tokens");
      tokens.push_back(b);
    }
    std::fprintf(stderr,
                 "sample: %s (step %lld, %lld parameters), context %lld, vocabulary %lld; %lld tokens, "
                 "temperature %g, top-k %lld, seed %llu\n",
                 cfg.checkpoint.c_str(), static_cast<long long>(c.step),
                 static_cast<long long>(c.num_params()), static_cast<long long>(t),
                 static_cast<long long>(vocab), static_cast<long long>(sc.tokens), sc.temperature,
                 static_cast<long long>(sc.top_k), static_cast<unsigned long long>(sc.seed));

    Rng rng(sc.seed);
    Tensor x(Shape{1, t}, DType::F32);
    nn::RunCtx rc;
    rc.training = false;
    std::string text(sc.prompt);
    std::fputs(printable(text).c_str(), stdout);
    for (int64_t i = 0; i < sc.tokens; ++i) {
      // The last min(len, T) tokens at the start of the window; zeros after them are never attended to.
      const int64_t len = std::min<int64_t>(t, static_cast<int64_t>(tokens.size()));
      float* xd = x.data<float>();
      std::fill(xd, xd + t, 0.0f);
      for (int64_t j = 0; j < len; ++j)
        xd[j] = static_cast<float>(tokens[tokens.size() - static_cast<size_t>(len) + static_cast<size_t>(j)]);
      const Tensor& logits = model->forward(x, rc);
      const int64_t next =
          pick_token(logits.data<float>() + (len - 1) * vocab, vocab, sc.temperature, sc.top_k, rng);
      tokens.push_back(next);
      const std::string byte(1, static_cast<char>(next));
      std::fputs(printable(byte).c_str(), stdout);
      std::fflush(stdout);
    }
    std::fputs("\n", stdout);
    return EXIT_OK;
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return EXIT_INTERNAL;
  }
}

}  // namespace hpc::train
