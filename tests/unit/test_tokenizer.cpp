// Tokenizers (src/text/): byte-level BPE from a tokenizer.json, SentencePiece .model files.
//
// Offline, on vocabularies written here: merge order and its ties, ignore_merges,
// the pre-tokenizer regexes' Unicode whitespace, bytes that are not UTF-8,
// added and special tokens, pieces of kilobytes, threads, and every bad-input
// message. Against third-party tokenizers (tiktoken, SentencePiece) when
// HPCTRAIN_TOKENIZER_REFERENCE names a directory that tests/e2e/tokenizer_*.sh
// filled: there every document's ids must equal the reference's and decode
// back to the document's bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "text/byte_level_bpe.h"
#include "text/pretoken_regex.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

using hpc::UserError;
using hpc::text::Tokenizer;
using nlohmann::json;

std::string symbol(uint8_t b) {
  std::string s;
  hpc::text::append_utf8(s, hpc::text::byte_to_unicode(b));
  return s;
}

// A byte-level vocabulary: the 256 byte symbols (id = byte), then `merges` in order, each adding its
// merged token; `extra` adds whole tokens without a merge.
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                    bool ignore_merges = false, const std::vector<std::string>& extra = {}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[symbol(static_cast<uint8_t>(b))] = b;
  json m = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    m.push_back(a + " " + b);
  }
  for (const std::string& e : extra) vocab[e] = static_cast<int>(vocab.size());
  const int eot = static_cast<int>(vocab.size());
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", ignore_merges}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"added_tokens",
           {{{"id", eot}, {"content", "<|endoftext|>"}, {"special", true}},
            {{"id", eot + 1}, {"content", "<tool>"}, {"special", false}}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

std::unique_ptr<Tokenizer> load(const json& j) { return Tokenizer::from_bytes(j.dump(), "test.json"); }

std::vector<int32_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// The message of the UserError `f` throws (and that it is one: exit code 2).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}

TEST(Utf8, ValidityFollowsRfc3629) {
  using hpc::text::first_invalid_utf8;
  EXPECT_EQ(first_invalid_utf8("plain ASCII text, long enough for the 8-byte path"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("é€😀"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("ab\xC0\xAF"), 2u);        // overlong '/'
  EXPECT_EQ(first_invalid_utf8("ab\xED\xA0\x80"), 2u);    // a surrogate
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("abcdefgh\xE3\x81"), 8u);  // truncated at the end
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);              // a stray continuation byte
  EXPECT_EQ(first_invalid_utf8("\xF0\x9F\x98\x80!"), std::string_view::npos);
}

TEST(PretokenRegex, WhiteSpaceIsUnicodeWhiteSpace) {
  EXPECT_EQ(hpc::text::white_space_as_unicode(R"(\s+(?!\S)|[^\s\p{L}]|\\s)"),
            R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}]|\\s)");
  const hpc::text::PretokenRegex re(R"(\s+)", "test");
  // White_Space: U+0085, U+00A0, U+202F, U+3000, U+2028; not: U+FEFF, U+200B, U+180E (PCRE2's own \s has it).
  for (const char* ws : {"\u0085", "\u00a0", "\u202f", "\u3000", "\u2028", "\t", "\x0b"}) {
    size_t b = 0, e = 0;
    ASSERT_TRUE(re.find(ws, 0, b, e)) << ws;
    EXPECT_EQ(e - b, std::string_view(ws).size()) << ws;
  }
  for (const char* not_ws : {"\ufeff", "\u200b", "\u180e", "x"}) {
    size_t b = 0, e = 0;
    EXPECT_FALSE(re.find(not_ws, 0, b, e)) << not_ws;
  }
}

TEST(PretokenRegex, Gpt2PatternSplitsAsTiktoken) {
  const hpc::text::PretokenRegex re(hpc::text::GPT2_PATTERN, "test");
  const auto pieces = [&](std::string_view s) {
    std::vector<std::string> out;
    size_t pos = 0, b = 0, e = 0;
    while (re.find(s, pos, b, e)) {
      out.emplace_back(s.substr(b, e - b));
      pos = e;
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world's end"), (V{"Hello", " world", "'s", " end"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));  // \s+(?!\S) leaves the last space to the word
  EXPECT_EQ(pieces("x\u00a0\u00a0y"), (V{"x", "\u00a0", "\u00a0", "y"}));  // only ' ' joins a word
  EXPECT_EQ(pieces("x\ufeffy"), (V{"x", "\ufeff", "y"}));  // U+FEFF: neither space, letter nor number
  EXPECT_EQ(pieces("42 ²³"), (V{"42", " ²³"}));
}

TEST(ByteLevelBpe, MergesLowestRankFirst) {
  const std::string a = symbol('a'), b = symbol('b'), c = symbol('c');
  // "bc" before "ab": abc → a, bc.
  auto t1 = load(tiny_tokenizer({{b, c}, {a, b}}));
  EXPECT_EQ(t1->encode("abc"), (std::vector<int32_t>{'a', 256}));
  // "ab" before "bc": abc → ab, c.
  auto t2 = load(tiny_tokenizer({{a, b}, {b, c}}));
  EXPECT_EQ(t2->encode("abc"), (std::vector<int32_t>{256, 'c'}));
}

TEST(ByteLevelBpe, EqualRanksMergeLeftmostFirst) {
  const std::string a = symbol('a');
  auto t = load(tiny_tokenizer({{a, a}, {a + a, a + a}}));
  EXPECT_EQ(t->encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(t->encode("aaaaa"), (std::vector<int32_t>{257, 'a'}));
  EXPECT_EQ(t->decode(t->encode("aaaaaaa")), "aaaaaaa");
}

TEST(ByteLevelBpe, IgnoreMergesTakesWholePiecesFromTheVocabulary) {
  // "xyz" is in the vocabulary, but no merge leads to it.
  const std::string x = symbol('x'), y = symbol('y'), z = symbol('z');
  auto with = load(tiny_tokenizer({{x, y}}, true, {x + y + z}));
  auto without = load(tiny_tokenizer({{x, y}}, false, {x + y + z}));
  EXPECT_EQ(with->encode("xyz"), (std::vector<int32_t>{257}));
  EXPECT_EQ(without->encode("xyz"), (std::vector<int32_t>{256, 'z'}));
  EXPECT_EQ(with->encode("xyzz"), (std::vector<int32_t>{256, 'z', 'z'}));  // not in the vocabulary: merged
}

TEST(ByteLevelBpe, BytesThatAreNotUtf8AreKeptAndSplitTheText) {
  auto t = load(tiny_tokenizer({{symbol('a'), symbol('b')}}));
  const std::string text =
      "ab\xff"
      "ab\xe3\x81"
      " ab";
  std::vector<int32_t> expect = t->encode("ab");
  expect.push_back(0xff);
  for (int32_t id : t->encode("ab")) expect.push_back(id);
  expect.push_back(0xe3);
  expect.push_back(0x81);
  for (int32_t id : t->encode(" ab")) expect.push_back(id);
  EXPECT_EQ(t->encode(text), expect);
  EXPECT_EQ(t->decode(t->encode(text)), text);
  EXPECT_TRUE(t->accepts_any_bytes());
}

TEST(ByteLevelBpe, SpecialTokensAreTextAndAddedTokensAreMatched) {
  auto t = load(tiny_tokenizer({}));
  const int32_t eot = 256, tool = 257;
  EXPECT_EQ(t->vocab_size(), 258);
  EXPECT_EQ(t->eos_id(), eot);  // named like an end of text
  EXPECT_EQ(t->bos_id(), std::nullopt);
  EXPECT_EQ(t->encode("<|endoftext|>"), bytes_of("<|endoftext|>"));
  std::vector<int32_t> expect = bytes_of("a");
  expect.push_back(tool);
  expect.push_back('b');
  EXPECT_EQ(t->encode("a<tool>b"), expect);
  EXPECT_EQ(t->decode({'a', eot, tool}), "a<|endoftext|><tool>");
  EXPECT_EQ(t->token_text(eot), "<|endoftext|>");
  EXPECT_NE(error_of([&] { t->decode({258}); }).find("token id 258 is outside the vocabulary of 258"),
            std::string::npos);
}

TEST(ByteLevelBpe, KilobytePiecesAndThreads) {
  const std::string sp = symbol(' ');
  auto t = load(tiny_tokenizer({{sp, sp}, {sp + sp, sp + sp}}));
  const std::string spaces(100000, ' ');
  const std::string text = "a" + spaces + "b";
  const std::vector<int32_t> ids = t->encode(text);
  EXPECT_EQ(ids.size(), 1 + 24999 + 2 + 2);  // a; 99999 spaces = 24999 fours, a pair, a single; " b"
  EXPECT_EQ(t->decode(ids), text);
  std::vector<int32_t> other;
  std::thread th([&] { other = t->encode(text); });
  th.join();
  EXPECT_EQ(other, ids);
}

TEST(ByteLevelBpe, LlamaStyleSplitThenByteLevel) {
  json j = tiny_tokenizer({});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", R"(\p{N}{1,3}|\p{L}+|\s+|[^\s\p{L}\p{N}]+)"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["model"]["vocab"][symbol('1') + symbol('2') + symbol('3')] = 300;
  j["model"]["ignore_merges"] = true;
  auto t = load(j);
  // Digits in groups of up to three: 1234567 → 123 456 7; 123 is one token (ignore_merges).
  EXPECT_EQ(t->encode("1234567"), (std::vector<int32_t>{300, '4', '5', '6', '7'}));
}

TEST(TokenizerErrors, OneLineNamingFileAndKey) {
  const auto msg = [](const std::string& bytes) {
    return error_of([&] { Tokenizer::from_bytes(bytes, "tok.json"); });
  };
  json wordpiece = tiny_tokenizer({});
  wordpiece["model"]["type"] = "WordPiece";
  EXPECT_NE(msg(wordpiece.dump()).find("tok.json: model.type is WordPiece: only byte-level BPE is supported"),
            std::string::npos);
  json unigram = tiny_tokenizer({});
  unigram["model"]["type"] = "Unigram";
  EXPECT_NE(msg(unigram.dump()).find("model.type is Unigram"), std::string::npos);
  json no_merges = tiny_tokenizer({});
  no_merges["model"].erase("merges");
  EXPECT_EQ(msg(no_merges.dump()), "tok.json: model.merges is missing");
  EXPECT_NE(msg("{\"model\": [1, 2,").find("tok.json: not valid JSON (parse error at line 1, column"),
            std::string::npos);
  json bad_merge = tiny_tokenizer({});
  bad_merge["model"]["merges"] = {"a zz"};
  EXPECT_EQ(msg(bad_merge.dump()), "tok.json: model.merges[0] ('a zz'): 'zz' is not in model.vocab");
  json no_byte = tiny_tokenizer({});
  no_byte["model"]["vocab"].erase(symbol(0));
  EXPECT_NE(msg(no_byte.dump()).find("lacks 'Ā', the byte-level symbol of byte 0x00"), std::string::npos);
  json nfc = tiny_tokenizer({});
  nfc["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(msg(nfc.dump()).find("tok.json: normalizer is NFKC: normalizers are not supported"),
            std::string::npos);
  json metaspace = tiny_tokenizer({});
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_NE(msg(metaspace.dump()).find("pre_tokenizer is Metaspace"), std::string::npos);
  json bad_regex = tiny_tokenizer({});
  bad_regex["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_NE(msg(bad_regex.dump()).find("the regex '(unclosed' does not compile"), std::string::npos);
  EXPECT_NE(msg("\x12\x34 this is not a protocol buffer").find("tok.json: not a SentencePiece model"),
            std::string::npos);
  EXPECT_NE(msg("").find("empty file"), std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::load("/nonexistent/tokenizer.json");
            }).find("/nonexistent/tokenizer.json: cannot open"),
            std::string::npos);
}

// ---- against third-party tokenizers ------------------------------------------------------------

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Each document of docs.json ([segment, ...]: strings, and integers for bytes that are not UTF-8) as bytes.
std::vector<std::string> reference_docs(const std::filesystem::path& dir) {
  std::vector<std::string> docs;
  for (const json& doc : json::parse(read(dir / "docs.json"))) {
    std::string s;
    for (const json& seg : doc)
      s += seg.is_string() ? seg.get<std::string>() : std::string(1, static_cast<char>(seg.get<int>()));
    docs.push_back(std::move(s));
  }
  return docs;
}

TEST(Reference, IdsEqualThirdPartyAndDecodeBack) {
  const char* env = std::getenv("HPCTRAIN_TOKENIZER_REFERENCE");
  if (!env) GTEST_SKIP() << "HPCTRAIN_TOKENIZER_REFERENCE not set (tests/e2e/tokenizer_*.sh set it)";
  const std::filesystem::path dir(env);
  const std::vector<std::string> docs = reference_docs(dir);
  int tokenizers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::filesystem::path& ids_path = entry.path();
    if (ids_path.extension() != ".ids") continue;
    std::filesystem::path tok_path = ids_path;
    tok_path.replace_extension(".json");
    if (!std::filesystem::exists(tok_path)) tok_path.replace_extension(".model");
    SCOPED_TRACE(tok_path.string());
    const auto tok = Tokenizer::load(tok_path.string());
    std::filesystem::path lossy = ids_path;
    const bool round_trip = !std::filesystem::exists(lossy.replace_extension(".lossy"));
    std::istringstream lines(read(ids_path));
    std::string line;
    size_t doc = 0, bytes = 0, mismatches = 0;
    for (; std::getline(lines, line) && doc < docs.size(); ++doc) {
      const std::string& text = docs[doc];
      if (line == "-") {  // the reference refuses it: text that is not UTF-8 without byte fallback
        EXPECT_FALSE(tok->accepts_any_bytes());
        EXPECT_NE(error_of([&] { tok->encode(text); }).find("not UTF-8 at byte"), std::string::npos);
        continue;
      }
      std::vector<int32_t> expect;
      std::istringstream in(line);
      for (int32_t id; in >> id;) expect.push_back(id);
      const std::vector<int32_t> got = tok->encode(text);
      bytes += text.size();
      if (got != expect) {
        size_t k = 0;
        while (k < got.size() && k < expect.size() && got[k] == expect[k]) ++k;
        std::string near;
        for (size_t i = k; i < std::min(expect.size(), k + 4); ++i)
          near += "'" + tok->token_text(expect[i]) + "' ";
        if (++mismatches <= 5)
          ADD_FAILURE() << "document " << doc << ": token " << k << " of " << expect.size()
                        << " differs (got " << (k < got.size() ? std::to_string(got[k]) : "end")
                        << ", reference " << (k < expect.size() ? std::to_string(expect[k]) : "end") << ": "
                        << near << ")";
      }
      if (round_trip) EXPECT_EQ(tok->decode(got), text) << "document " << doc << " does not decode back";
    }
    EXPECT_EQ(doc, docs.size()) << "the reference has ids for fewer documents";
    EXPECT_EQ(mismatches, 0u);
    std::printf("%s: %zu documents, %zu bytes, %zu differ from the reference%s\n", tok->name().c_str(), doc,
                bytes, mismatches, round_trip ? ", every one decodes back" : "");
    ++tokenizers;
  }
  EXPECT_GT(tokenizers, 0) << "no NAME.ids in " << dir;
}

}  // namespace
