// parse_tokenizer_json: a Hugging Face tokenizer.json → BpeSpec, with nlohmann::json.
//
// Only what byte-level BPE needs is read, and everything that would change
// the ids and is not implemented is refused by name (a normalizer, a
// WordPiece or Unigram model, BPE dropout, a Metaspace pre-tokenizer, …):
// silently ignoring a field would give other ids than the tokenizer's own.
// bos/eos come from the post-processor (Llama 3's template puts
// <|begin_of_text|> first); without one, eos is the special added token named
// like an end of text (<|endoftext|> of GPT-2 and Qwen, <|end_of_text|>, </s>).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/byte_level_bpe.h"

namespace hpc::text {

namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UserError(origin_ + ": " + key + " " + what);
  }
  const json& require(const json& obj, const std::string& parent, const char* name) const {
    const std::string key = parent.empty() ? name : parent + "." + name;
    const auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) fail(key, "is missing");
    return *it;
  }
  std::string string_at(const json& obj, const std::string& parent, const char* name) const {
    const json& v = require(obj, parent, name);
    if (!v.is_string()) fail(parent + "." + name, "is not a string");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& parent, const char* name, bool fallback) const {
    const auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(parent + "." + name, "is not true or false");
    return it->get<bool>();
  }
  int32_t id(const json& v, const std::string& key) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(key, "is not a token id (an integer in [0, 2^31))");
    return static_cast<int32_t>(v.get<int64_t>());
  }
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
};

// A Split's pattern: {"Regex": "..."} as it is, {"String": "..."} with every character taken literally.
std::string split_pattern(const Reader& r, const json& split, const std::string& key) {
  const json& pattern = r.require(split, key, "pattern");
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) return pattern["Regex"].get<std::string>();
  if (!pattern.contains("String") || !pattern["String"].is_string())
    r.fail(key + ".pattern", "is neither {\"Regex\": …} nor {\"String\": …}");
  std::string quoted;
  for (char c : pattern["String"].get<std::string>()) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) quoted += '\\';
    quoted += c;
  }
  return quoted;
}

void read_pre_tokenizer(const Reader& r, const json& pt, const std::string& key, BpeSpec& spec) {
  if (!pt.is_object()) r.fail(key, "is not an object");
  const std::string type = r.string_at(pt, key, "type");
  if (type == "Sequence") {
    const json& list = r.require(pt, key, "pretokenizers");
    if (!list.is_array()) r.fail(key + ".pretokenizers", "is not a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(r, list[i], key + ".pretokenizers[" + std::to_string(i) + "]", spec);
    return;
  }
  if (!spec.stages.empty() && spec.stages.back().kind == BpeSpec::Stage::ByteLevel)
    r.fail(key,
           "(" + type + ") comes after ByteLevel: only Split pre-tokenizers before ByteLevel are supported");
  BpeSpec::Stage stage;
  if (type == "ByteLevel") {
    stage.kind = BpeSpec::Stage::ByteLevel;
    if (r.flag(pt, key, "use_regex", true)) stage.pattern = GPT2_PATTERN;
    stage.add_prefix_space = r.flag(pt, key, "add_prefix_space", false);
  } else if (type == "Split") {
    stage.pattern = split_pattern(r, pt, key);
    const std::string behavior = r.string_at(pt, key, "behavior");
    if (behavior != "Isolated" && behavior != "Removed")
      r.fail(key + ".behavior", "is \"" + behavior + "\": only Isolated and Removed are supported");
    stage.remove_matches = behavior == "Removed";
    if (r.flag(pt, key, "invert", false)) r.fail(key + ".invert", "is true: not supported");
  } else if (type == "Metaspace") {
    r.fail(key,
           "is Metaspace: a SentencePiece-style vocabulary, not byte-level BPE (pack its tokenizer.model)");
  } else {
    r.fail(key,
           "is " + type + ": only ByteLevel, Split and a Sequence of them are supported (byte-level BPE)");
  }
  spec.stages.push_back(std::move(stage));
}

// A vocabulary string of a merge: "a b" (one space) or ["a", "b"] (tokenizers >= 0.20).
std::pair<std::string, std::string> read_merge(const Reader& r, const json& m, size_t i) {
  const std::string key = "model.merges[" + std::to_string(i) + "]";
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
        s.find(' ', space + 1) != std::string::npos)
      r.fail(key, "('" + s + "') is not two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string())
    r.fail(key, "is neither \"a b\" nor [\"a\", \"b\"]");
  return {m[0].get<std::string>(), m[1].get<std::string>()};
}

// The special token at an end of a TemplateProcessing's "single" template, if it is one.
std::optional<int32_t> template_end(const Reader& r, const json& proc, const std::string& key, bool first) {
  const auto single = proc.find("single");
  if (single == proc.end() || !single->is_array() || single->empty()) return std::nullopt;
  const json& item = first ? single->front() : single->back();
  if (!item.contains("SpecialToken")) return std::nullopt;
  const std::string name = r.string_at(item["SpecialToken"], key + ".single", "id");
  const auto specials = proc.find("special_tokens");
  if (specials == proc.end() || !specials->contains(name))
    r.fail(key + ".special_tokens", "lacks '" + name + "', which the template uses");
  const json& ids = r.require((*specials)[name], key + ".special_tokens." + name, "ids");
  if (!ids.is_array() || ids.size() != 1) r.fail(key + ".special_tokens." + name + ".ids", "is not one id");
  return r.id(ids[0], key + ".special_tokens." + name + ".ids[0]");
}

void read_post_processor(const Reader& r, const json& pp, const std::string& key, BpeSpec& spec) {
  if (!pp.is_object()) return;
  const auto type = pp.find("type");
  if (type == pp.end() || !type->is_string()) return;
  if (*type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (size_t i = 0; i < pp["processors"].size(); ++i)
      read_post_processor(r, pp["processors"][i], key + ".processors[" + std::to_string(i) + "]", spec);
  } else if (*type == "TemplateProcessing") {
    if (auto bos = template_end(r, pp, key, true)) spec.bos = bos;
    if (auto eos = template_end(r, pp, key, false)) spec.eos = eos;
  } else if (*type == "RobertaProcessing" || *type == "BertProcessing") {
    const json& cls = r.require(pp, key, "cls");
    const json& sep = r.require(pp, key, "sep");
    if (cls.is_array() && cls.size() == 2) spec.bos = r.id(cls[1], key + ".cls[1]");
    if (sep.is_array() && sep.size() == 2) spec.eos = r.id(sep[1], key + ".sep[1]");
  }
}

}  // namespace

BpeSpec parse_tokenizer_json(const std::string& bytes, const std::string& origin) {
  const Reader r(origin);
  json j;
  try {
    j = json::parse(bytes);
  } catch (const json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, …"
    if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
      what = what.substr(what.find("] ") + 2);
    throw UserError(origin + ": not valid JSON (" + what + ")");
  }
  if (!j.is_object()) throw UserError(origin + ": not a tokenizer.json (the top level is not a JSON object)");
  BpeSpec spec;
  spec.origin = origin;

  const json& model = r.require(j, "", "model");
  if (!model.is_object()) r.fail("model", "is not an object");
  // Older files leave the type out; a model with merges is then BPE.
  const std::string type = model.contains("type") ? r.string_at(model, "model", "type") : "BPE";
  if (type != "BPE")
    r.fail("model.type",
           "is " + type + ": only byte-level BPE is supported" +
               (type == "WordPiece" || type == "Unigram" || type == "WordLevel"
                    ? std::string(" (not ") + type + "; a SentencePiece .model can be used directly)"
                    : std::string()));
  if (r.flag(model, "model", "byte_fallback", false))
    r.fail("model.byte_fallback",
           "is true: a SentencePiece-style BPE, not byte-level (pack its tokenizer.model)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && model[affix].is_string() && !model[affix].get<std::string>().empty())
      r.fail(std::string("model.") + affix, "is set: not supported in byte-level BPE");
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0)
    r.fail("model.dropout", "is set: BPE dropout (random merges) is not supported");
  spec.ignore_merges = r.flag(model, "model", "ignore_merges", false);

  const json& vocab = r.require(model, "model", "vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "is not an object of token: id");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items())
    spec.vocab.emplace_back(token, r.id(id, "model.vocab['" + token + "']"));
  const json& merges = r.require(model, "model", "merges");
  if (!merges.is_array()) r.fail("model.merges", "is not a list");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) spec.merges.push_back(read_merge(r, merges[i], i));

  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    const std::string ntype =
        n.is_object() && n.contains("type") && n["type"].is_string() ? n["type"].get<std::string>() : "?";
    r.fail("normalizer",
           "is " + ntype + ": normalizers are not supported (byte-level BPE of GPT-2 and Llama 3 has none)");
  }
  const json& pre = r.require(j, "", "pre_tokenizer");
  read_pre_tokenizer(r, pre, "pre_tokenizer", spec);
  if (spec.stages.empty() || spec.stages.back().kind != BpeSpec::Stage::ByteLevel)
    r.fail("pre_tokenizer", "has no ByteLevel stage: not a byte-level BPE tokenizer");

  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    const json& added = j["added_tokens"];
    if (!added.is_array()) r.fail("added_tokens", "is not a list");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      BpeSpec::AddedToken a;
      a.id = r.id(r.require(added[i], key, "id"), key + ".id");
      a.content = r.string_at(added[i], key, "content");
      a.special = r.flag(added[i], key, "special", false);
      if (!a.special)
        for (const char* opt : {"single_word", "lstrip", "rstrip"})
          if (r.flag(added[i], key, opt, false)) r.fail(key + "." + opt, "is true: not supported");
      spec.added.push_back(std::move(a));
    }
  }
  if (j.contains("post_processor")) read_post_processor(r, j["post_processor"], "post_processor", spec);
  if (!spec.eos)
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
      for (const auto& a : spec.added)
        if (a.special && a.content == name && !spec.eos) spec.eos = a.id;
  return spec;
}

}  // namespace hpc::text
