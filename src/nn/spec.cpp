// Model-spec parser and presets.
//
// Grammar (whitespace separates layers):
//   spec  := layer*
//   layer := NAME [ '(' arg (',' arg)* ')' ]
//   arg   := NUMBER | NAME '=' NUMBER | layer        (layers only inside res(...))
// A hand-written recursive-descent parser: small, and its errors can say
// exactly where the text went wrong.
#include "nn/spec.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace hpc::nn {

namespace {

class SpecParser {
 public:
  explicit SpecParser(const std::string& text) : s_(text) {}

  std::vector<LayerArgs> parse_all() {
    std::vector<LayerArgs> out;
    skip_space();
    while (pos_ < s_.size()) {
      out.push_back(parse_layer());
      skip_space();
    }
    if (out.empty()) fail("the spec is empty");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("model spec: " + what + " at position " + std::to_string(pos_ + 1) + " of '" + s_ + "'");
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool is_name_char(char c) const {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  }

  std::string parse_name() {
    size_t start = pos_;
    if (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_])))
      while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a layer name");
    return s_.substr(start, pos_ - start);
  }

  double parse_number() {
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(begin, &end);
    if (end == begin || errno == ERANGE || !std::isfinite(v)) fail("expected a number");
    pos_ += static_cast<size_t>(end - begin);
    return v;
  }

  LayerArgs parse_layer() {
    LayerArgs a;
    size_t start = pos_;
    a.name = parse_name();
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '(') {
      ++pos_;
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ')') fail("empty argument list");
      for (;;) {
        skip_space();
        parse_arg(a);
        skip_space();
        if (pos_ >= s_.size()) fail("missing ')'");
        if (s_[pos_] == ')') break;
        if (a.name == "res" && s_[pos_] != ',') continue;  // res(conv(…) bn relu …): layers need no commas
        if (s_[pos_] != ',') fail("expected ',' or ')'");
        ++pos_;
      }
      ++pos_;
    }
    a.text = s_.substr(start, pos_ - start);
    return a;
  }

  void parse_arg(LayerArgs& a) {
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') {
      if (!a.named.empty()) fail("positional argument after a named one");
      a.positional.push_back(parse_number());
      return;
    }
    size_t save = pos_;
    std::string name = parse_name();
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '=') {
      ++pos_;
      skip_space();
      if (a.named.count(name)) fail("argument '" + name + "' given twice");
      a.named[name] = parse_number();
      return;
    }
    if (a.name != "res") fail("expected a number or key=value");
    pos_ = save;
    a.children.push_back(parse_layer());
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<LayerArgs> parse_spec(const std::string& text) { return SpecParser(text).parse_all(); }

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {
      "simplenet", "mlp",       "lenet5",     "cnn",         "resnet20",       "resnet50",   "gpt-tiny",
      "gpt-small", "gpt2-124m", "llama-tiny", "llama-small", "tinyllama-1.1b", "llama3.2-1b"};
  return names;
}

namespace {

// A language-model preset: its family and shape (0 in ffn: the family's default width).
struct LmShape {
  bool llama = false;
  int64_t layers, heads, kv_heads, width, ffn, context, vocab;
  double theta = 10000;
  bool tied = true;
  std::string rope;  // the llama_block's rope scaling arguments, e.g. ",llama3=32,low=1,high=4,orig=8192"
};

// The presets: tiny ones for tests, small ones for CPU benchmarks (a few
// million parameters; llama-small has gpt-small's 12·width² per block:
// a 3×-wide SwiGLU and half as many kv heads), and real shapes, so that a
// Hugging Face checkpoint of that model loads into them: GPT-2 small (124M
// with its 50257-token vocabulary), TinyLlama-1.1B (Llama 2's architecture,
// 32000 tokens, untied head) and Llama 3.2 1B (128256 tokens, rope_theta
// 500000 with Llama 3's rope scaling, tied head). The Llama ones train on
// windows of 2048 tokens by default (model.context changes that; rotary
// positions have no table to outgrow).
bool lm_preset(const std::string& name, LmShape* s) {
  if (name == "gpt-tiny")
    *s = {false, 2, 2, 2, 64, 0, 64, 256, 10000, true, ""};
  else if (name == "gpt-small")
    *s = {false, 4, 4, 4, 256, 0, 128, 256, 10000, true, ""};
  else if (name == "gpt2-124m")
    *s = {false, 12, 12, 12, 768, 0, 1024, 50257, 10000, true, ""};
  else if (name == "llama-tiny")
    *s = {true, 2, 4, 2, 64, 192, 64, 256, 10000, false, ""};
  else if (name == "llama-small")
    *s = {true, 4, 4, 2, 256, 768, 128, 256, 10000, false, ""};
  else if (name == "tinyllama-1.1b")
    *s = {true, 22, 32, 4, 2048, 5632, 2048, 32000, 10000, false, ""};
  else if (name == "llama3.2-1b")
    *s = {true, 16, 32, 8, 2048, 8192, 2048, 128256, 500000, true, ",llama3=32,low=1,high=4,orig=8192"};
  else
    return false;
  return true;
}

std::string lm_spec(const PresetOptions& m, int64_t num_classes) {
  LmShape g{};
  lm_preset(m.preset, &g);
  const bool kv_given = m.kv_heads > 0;
  for (auto [value, field] :
       {std::pair{m.layers, &g.layers}, std::pair{m.heads, &g.heads}, std::pair{m.kv_heads, &g.kv_heads},
        std::pair{m.width, &g.width}, std::pair{m.ffn, &g.ffn}, std::pair{m.context, &g.context},
        std::pair{m.vocab, &g.vocab}})
    if (value > 0) *field = value;
  if (!g.llama && !kv_given) g.kv_heads = g.heads;  // a GPT's heads option keeps it multi-head
  if (g.llama && !kv_given && g.heads % g.kv_heads != 0) g.kv_heads = g.heads;
  if (g.width % g.heads != 0)
    throw UserError("model.width " + std::to_string(g.width) + " is not a multiple of model.heads " +
                    std::to_string(g.heads) + " (" + m.preset + ")");
  if (g.heads % g.kv_heads != 0)
    throw UserError("model.heads " + std::to_string(g.heads) + " is not a multiple of model.kv_heads " +
                    std::to_string(g.kv_heads) + " (" + m.preset + ")");
  if (num_classes > g.vocab)
    throw UserError("the data has " + std::to_string(num_classes) + " token ids but model.vocab is " +
                    std::to_string(g.vocab) + " (" + m.preset + "): set --model.vocab " +
                    std::to_string(num_classes) + " or more");
  std::ostringstream s;
  s << "embed(" << g.vocab << "," << g.width << "," << g.context << (g.llama ? ",positions=0" : "") << ")";
  for (int64_t i = 0; i < g.layers; ++i) {
    s << (g.llama ? " llama_block(" : " block(") << g.heads;
    if (g.kv_heads != g.heads) s << ",kv_heads=" << g.kv_heads;
    if (g.ffn > 0) s << ",ffn=" << g.ffn;
    if (g.llama && g.theta != 10000) s << ",theta=" << g.theta;
    s << g.rope << ",layers=" << g.layers << (m.recompute ? ",recompute=1" : "") << ")";
  }
  s << (g.llama ? " rmsnorm" : " ln") << " lm_head(" << g.vocab << (g.tied ? "" : ",tied=0") << ")";
  return s.str();
}

// ResNet-50 (He et al. 2016) in torchvision's layout ("v1.5": a bottleneck's
// stride is on its 3x3 conv): a 7x7/2 conv and a 3x3/2 max pool, then 3, 4,
// 6 and 3 bottleneck blocks of width W, 2W, 4W, 8W (1x1 → 3x3 → 1x1 to 4
// times the width), a projection shortcut (1x1 conv, bn) wherever a block
// changes the shape, global average pooling, a linear classifier. W = 64 is
// torchvision's resnet50 (25.6M parameters with 1000 classes).
std::string resnet50_spec(int64_t width, bool zero_init_residual, int64_t num_classes) {
  std::ostringstream s;
  s << "conv(" << width << ",7,stride=2,pad=3,bias=0) bn relu maxpool(3,stride=2,pad=1)";
  const int blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage)
    for (int b = 0; b < blocks[stage]; ++b) {
      const int64_t planes = width << stage;
      const int stride = stage > 0 && b == 0 ? 2 : 1;
      s << " res(conv(" << planes << ",1,bias=0) bn relu conv(" << planes << ",3,stride=" << stride
        << ",pad=1,bias=0) bn relu conv(" << 4 * planes << ",1,bias=0) "
        << (zero_init_residual ? "bn(gamma=0)" : "bn") << ") relu";
    }
  s << " gap linear(" << num_classes << ")";
  return s.str();
}

}  // namespace

bool is_language_preset(const std::string& preset) {
  LmShape unused{};
  return lm_preset(preset, &unused);
}

int64_t spec_context(const std::vector<LayerArgs>& layers) {
  for (const LayerArgs& a : layers)
    if (a.name == "embed" && a.positional.size() >= 3 && a.positional[2] >= 1)
      return static_cast<int64_t>(a.positional[2]);
  return 0;
}

std::string preset_spec(const PresetOptions& model, int64_t num_classes) {
  if (is_language_preset(model.preset)) return lm_spec(model, num_classes);
  const bool resnet50 = model.preset == "resnet50";
  for (auto [value, name] :
       {std::pair{model.layers, "layers"}, std::pair{model.heads, "heads"},
        std::pair{model.kv_heads, "kv_heads"}, std::pair{resnet50 ? 0 : model.width, "width"},
        std::pair{model.ffn, "ffn"}, std::pair{model.context, "context"}, std::pair{model.vocab, "vocab"}})
    if (value != 0)
      throw UserError(std::string("model.") + name + " applies to the language-model presets" +
                      (std::string(name) == "width" ? " and resnet50" : "") + " only, not to model.preset " +
                      model.preset);
  if (model.recompute)
    throw UserError("model.recompute applies to the language-model presets only, not to model.preset " +
                    model.preset);
  if (model.zero_init_residual && model.preset != "resnet20" && !resnet50)
    throw UserError("model.zero_init_residual applies to resnet20 and resnet50 only, not to model.preset " +
                    model.preset);
  if (resnet50)
    return resnet50_spec(model.width > 0 ? model.width : 64, model.zero_init_residual, num_classes);
  std::string spec = preset_spec(model.preset, model.hidden, num_classes);
  if (model.zero_init_residual)  // resnet20: the second bn of every basic block
    for (size_t at = spec.find("bn) relu"); at != std::string::npos; at = spec.find("bn) relu", at + 20))
      spec.replace(at, 2, "bn(gamma=0)");
  return spec;
}

std::string preset_spec(const std::string& preset, const std::vector<int>& hidden, int64_t num_classes) {
  if (is_language_preset(preset)) {
    PresetOptions m;
    m.preset = preset;
    return lm_spec(m, num_classes);
  }
  const std::string k = std::to_string(num_classes);
  std::ostringstream s;
  if (preset == "simplenet") {
    s << "flatten linear(" << k << ")";
  } else if (preset == "mlp") {
    s << "flatten";
    for (int h : hidden) s << " linear(" << h << ") relu";
    s << " linear(" << k << ")";
  } else if (preset == "lenet5") {
    // LeCun et al. 1998 with ReLU and max pooling, padded so 28×28 inputs work like the 32×32 original.
    s << "conv(6,5,pad=2) relu maxpool(2) conv(16,5) relu maxpool(2) flatten "
      << "linear(120) relu linear(84) relu linear(" << k << ")";
  } else if (preset == "cnn") {
    s << "conv(32,3,pad=1) bn relu maxpool(2) conv(64,3,pad=1) bn relu maxpool(2) flatten "
      << "linear(128) relu linear(" << k << ")";
  } else if (preset == "resnet20") {
    // He et al. 2016, CIFAR variant: 3 stages × 3 basic blocks, 16/32/64 channels, 6n+2 = 20 layers.
    auto block = [&](int ch, int stride) {
      s << " res(conv(" << ch << ",3,stride=" << stride << ",pad=1,bias=0) bn relu conv(" << ch
        << ",3,pad=1,bias=0) bn) relu";
    };
    s << "conv(16,3,pad=1,bias=0) bn relu";
    for (int stage = 0; stage < 3; ++stage)
      for (int b = 0; b < 3; ++b) block(16 << stage, (stage > 0 && b == 0) ? 2 : 1);
    s << " gap linear(" << k << ")";
  } else if (preset == "resnet50") {
    return resnet50_spec(64, false, num_classes);
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw UserError("unknown model preset '" + preset + "' (known: " + known + ")");
  }
  return s.str();
}

}  // namespace hpc::nn
