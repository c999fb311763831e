// hpctrain sample (see sample.h): model → autoregressive draws, with or
// without the key/value cache.
#include "train/sample.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>

#include "backend/cpu/threads.h"
#include "backend/ops.h"
#include "core/error.h"
#include "nn/model.h"
#include "text/tokenizer.h"
#include "train/model_source.h"

namespace hpc::train {

namespace {

constexpr int64_t BYTE_VOCAB = 256;  // the tokens that decode to text with the byte-level tokenizer

// Text ↔ token ids for sample: the model's tokenizer, or its bytes.
class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t draw_limit() const = 0;  // only ids below it can be drawn
  virtual std::string name() const = 0;
  std::optional<int64_t> bos, eos;
};

// The model's tokenizer (hpc::text: byte-level BPE or SentencePiece).
class TokenizerCodec final : public Codec {
 public:
  TokenizerCodec(std::unique_ptr<text::Tokenizer> t, int64_t model_vocab, std::string origin)
      : t_(std::move(t)), limit_(std::min(model_vocab, t_->vocab_size())), origin_(std::move(origin)) {}
  std::vector<int64_t> encode(const std::string& text) const override {
    const std::vector<int32_t> ids = t_->encode(text);
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int32_t> in;
    in.reserve(ids.size());
    for (int64_t id : ids)
      if (id >= 0 && id < t_->vocab_size()) in.push_back(static_cast<int32_t>(id));
    return t_->decode(in);
  }
  int64_t draw_limit() const override { return limit_; }
  std::string name() const override { return t_->name() + " from " + origin_; }

 private:
  std::unique_ptr<text::Tokenizer> t_;
  int64_t limit_;
  std::string origin_;
};

class ByteCodec final : public Codec {
 public:
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    for (unsigned char b : text) ids.push_back(b);
    return ids;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string s;
    for (int64_t id : ids)
      if (id >= 0 && id < BYTE_VOCAB) s += static_cast<char>(id);
    return s;
  }
  int64_t draw_limit() const override { return BYTE_VOCAB; }
  std::string name() const override { return "bytes (no tokenizer with the model)"; }
};

// The model of `src` on the CPU, with its parameters and buffers; UserError
// when it is not a language model ([T] token ids → [T, V] logits).
std::unique_ptr<nn::Model> language_model(const ModelSource& src) {
  auto model = std::make_unique<nn::Model>(src.spec, src.input_shape, DType::F32, 0, Device::CPU);
  const Shape& in = model->input_shape();
  const Shape& out = model->output_shape();
  if (in.rank() != 1 || out.rank() != 2 || out[0] != in[0])
    throw UserError(src.what + " holds a model for inputs " + in.str() + " → " + out.str() +
                    ", not a language model (token windows [T] → logits [T, vocab]); sample needs one "
                    "trained on text, e.g. --model.preset gpt-tiny on `hpcdata pack --from text` data");
  if (src.num_params() != model->num_params())
    throw UserError(src.what + ": " + std::to_string(src.num_params()) +
                    " parameters stored but its model spec has " + std::to_string(model->num_params()));
  backend::copy(src.params.view(model->params().shape()), model->params());
  for (auto& [name, t] : model->buffers()) {
    auto it = std::find_if(src.buffers.begin(), src.buffers.end(),
                           [&n = name](const auto& b) { return b.name == n; });
    if (it == src.buffers.end() || it->value.count() != t.count())
      throw UserError(src.what + ": buffer '" + name + "' is missing or has the wrong size");
    backend::copy(it->value.view(t.shape()), t);
  }
  return model;
}

// The logits of the last token of tokens[start, end) (end − start ≤ T), by
// the cache (decoding tokens[from, end), the earlier ones already in it) or
// by a full forward of the window.
class Generator {
 public:
  Generator(nn::Model& model, bool cached) : model_(model), cached_(cached), t_(model.input_shape()[0]) {
    window_ = Tensor(Shape{1, t_}, DType::F32);
  }
  int64_t context() const { return t_; }

  // Starts a window at tokens[start] and returns the logits after tokens[start, end).
  const float* restart(const std::vector<int64_t>& tokens, size_t start, size_t end) {
    if (cached_) model_.start_decode(t_);
    return extend(tokens, start, start, end);
  }
  // tokens[start, from) are in the window already; adds tokens[from, end).
  const float* extend(const std::vector<int64_t>& tokens, size_t start, size_t from, size_t end) {
    const int64_t vocab = model_.output_shape()[1];
    if (cached_) {
      Tensor ids(Shape{1, int64_t(end - from)}, DType::F32);
      for (size_t i = from; i < end; ++i) ids.data<float>()[i - from] = float(tokens[i]);
      const Tensor& logits = model_.decode(ids, int64_t(from - start), run_);
      return logits.data<float>() + (int64_t(end - from) - 1) * vocab;
    }
    // A shorter sequence sits at the start of the window; zeros after it are never attended to (causal).
    float* x = window_.data<float>();
    std::fill(x, x + t_, 0.0f);
    for (size_t i = start; i < end; ++i) x[i - start] = float(tokens[i]);
    const Tensor& logits = model_.forward(window_, run_);
    return logits.data<float>() + (int64_t(end - start) - 1) * vocab;
  }

 private:
  nn::Model& model_;
  bool cached_;
  int64_t t_;
  Tensor window_;
  nn::RunCtx run_ = [] {
    nn::RunCtx r;
    r.training = false;
    return r;
  }();
};

}  // namespace

int64_t pick_token(const float* logits, int64_t vocab, int64_t limit, double temperature, int64_t top_k,
                   Rng& rng) {
  const int64_t n = std::min(vocab, limit);
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
    backend::cpu::configure_threads(1);  // one process: every core to OpenBLAS
    const ModelSource src = load_model_source(cfg);
    std::unique_ptr<nn::Model> model = language_model(src);
    const int64_t vocab = model->output_shape()[1];
    std::unique_ptr<Codec> codec;
    if (!src.tokenizer_bytes.empty()) {
      std::unique_ptr<text::Tokenizer> t =
          text::Tokenizer::from_bytes(src.tokenizer_bytes, src.tokenizer_origin);
      codec = std::make_unique<TokenizerCodec>(std::move(t), vocab, src.tokenizer_origin);
    } else {
      codec = std::make_unique<ByteCodec>();
    }
    codec->bos = src.bos;
    codec->eos = src.eos;

    std::vector<int64_t> tokens;
    if (codec->bos) tokens.push_back(*codec->bos);
    const std::vector<int64_t> prompt = codec->encode(sc.prompt);
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    if (tokens.empty())
      throw UserError(
          "option --prompt: give the text to continue (the model has no beginning-of-text token to "
          "start from)");
    for (int64_t id : tokens)
      if (id < 0 || id >= vocab)
        throw UserError("option --prompt: token " + std::to_string(id) +
                        " is outside the model's vocabulary of " + std::to_string(vocab) + " tokens");
    Generator gen(*model, sc.kv_cache);
    const int64_t t = gen.context();
    std::fprintf(stderr,
                 "sample: %s (step %lld, %lld parameters), context %lld, vocabulary %lld; %lld tokens, "
                 "temperature %g, top-k %lld, seed %llu; tokenizer: %s; %s\n",
                 src.path.c_str(), static_cast<long long>(src.step), static_cast<long long>(src.num_params()),
                 static_cast<long long>(t), static_cast<long long>(vocab), static_cast<long long>(sc.tokens),
                 sc.temperature, static_cast<long long>(sc.top_k), static_cast<unsigned long long>(sc.seed),
                 codec->name().c_str(),
                 sc.kv_cache ? "key/value cache" : "no cache (a full window per token)");

    Rng rng(sc.seed);
    std::fputs(printable(sc.prompt).c_str(), stdout);
    std::string shown = codec->decode(tokens);
    // The window: tokens[start, end) with end − start ≤ T; full, it restarts on its last T/2 tokens.
    size_t start = tokens.size() > size_t(t) ? tokens.size() - size_t(t) : 0;
    const float* logits = gen.restart(tokens, start, tokens.size());
    int64_t drawn = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (; drawn < sc.tokens; ++drawn) {
      const int64_t next = pick_token(logits, vocab, codec->draw_limit(), sc.temperature, sc.top_k, rng);
      tokens.push_back(next);
      const std::string text = codec->decode(tokens);
      if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
        std::fputs(printable(text.substr(shown.size())).c_str(), stdout);
        shown = text;
      }
      std::fflush(stdout);
      if (sc.stop && codec->eos && next == *codec->eos) {
        ++drawn;
        break;
      }
      if (drawn + 1 == sc.tokens) break;  // no logits needed after the last token
      if (tokens.size() - start > size_t(t)) {
        start = tokens.size() - size_t(t / 2);
        logits = gen.restart(tokens, start, tokens.size());
      } else {
        logits = gen.extend(tokens, start, tokens.size() - 1, tokens.size());
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fputs("\n", stdout);
    std::fprintf(stderr, "sample: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(drawn),
                 seconds, double(drawn) / std::max(seconds, 1e-9));
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
