// ByteLevelBpe: the byte-level BPE model (byte_level_bpe.h) and its decoder.
#include "text/byte_level_bpe.h"

#include <algorithm>
#include <atomic>
#include <string_view>

#include "core/error.h"
#include "text/merge_table.h"
#include "text/utf8.h"

namespace hpc::text {

const char* const GPT2_PATTERN =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

uint32_t byte_to_unicode(uint8_t b) {
  // Printable Latin-1 stands for itself; the 68 other bytes (controls, space, DEL, NBSP, soft hyphen)
  // take U+0100 onwards, in byte order.
  const auto printable = [](unsigned v) {
    return (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || v >= 174;
  };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (unsigned v = 0; v < b; ++v) n += printable(v) ? 0 : 1;
  return 256 + n;
}

namespace {

// Decodes a vocabulary string of the byte-level alphabet to the bytes it stands for; false when a
// character is outside the alphabet (an added token's literal text).
bool byte_level_to_bytes(const std::string& s, const std::vector<int>& byte_of_cp, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    uint32_t cp = static_cast<unsigned char>(s[i]) & (n == 1 ? 0x7F : n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (cp >= byte_of_cp.size() || byte_of_cp[cp] < 0) return false;
    out += static_cast<char>(byte_of_cp[cp]);
    i += n;
  }
  return true;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Ids of recent short pieces, per thread; `owner` is the serial number of the tokenizer they belong to
// (serials are never reused, unlike addresses).
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids;
};
constexpr size_t CACHED_PIECE_BYTES = 48, CACHE_ENTRIES = 1 << 16;
std::atomic<uint64_t> next_serial{1};

class ByteLevelBpe : public Tokenizer {
 public:
  explicit ByteLevelBpe(const BpeSpec& spec);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(text_of_id_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::string name() const override {
    return "byte-level BPE (tokenizer.json, " + std::to_string(vocab_size()) + " tokens)";
  }
  std::string format() const override { return "tokenizer.json"; }
  bool accepts_any_bytes() const override { return true; }
  std::string token_text(int32_t id) const override;

 private:
  struct Stage {
    std::unique_ptr<PretokenRegex> regex;  // null: this stage does not split (ByteLevel without use_regex)
    bool remove_matches = false;
  };

  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void split(size_t stage, std::string_view piece, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge(std::string_view piece, std::vector<int32_t>& out) const;

  std::string origin_;
  uint64_t serial_ = next_serial.fetch_add(1);
  std::vector<std::string> text_of_id_;  // the bytes each id decodes to ("" for an unused id)
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of_bytes_;
  int32_t byte_id_[256] = {};
  MergeTable merges_;
  std::vector<Stage> stages_;
  bool add_prefix_space_ = false, ignore_merges_ = false;
  std::vector<BpeSpec::AddedToken> matched_added_;  // the non-special added tokens, cut out of the text
  std::optional<int32_t> bos_, eos_;
};

ByteLevelBpe::ByteLevelBpe(const BpeSpec& spec)
    : origin_(spec.origin), ignore_merges_(spec.ignore_merges), bos_(spec.bos), eos_(spec.eos) {
  std::vector<int> byte_of_cp(512, -1);
  for (int b = 0; b < 256; ++b) byte_of_cp[byte_to_unicode(static_cast<uint8_t>(b))] = b;

  int32_t max_id = -1;
  for (const auto& [s, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const auto& a : spec.added) max_id = std::max(max_id, a.id);
  text_of_id_.assign(static_cast<size_t>(max_id) + 1, std::string());
  std::vector<char> used(text_of_id_.size(), 0);

  std::unordered_map<std::string_view, int32_t> id_of_symbol;  // the vocabulary as written in the file
  id_of_symbol.reserve(spec.vocab.size());
  id_of_bytes_.reserve(spec.vocab.size());
  std::string bytes;
  for (const auto& [s, id] : spec.vocab) {
    if (id < 0)
      throw UserError(origin_ + ": model.vocab gives '" + s + "' the negative id " + std::to_string(id));
    if (used[static_cast<size_t>(id)])
      throw UserError(origin_ + ": model.vocab gives id " + std::to_string(id) + " to two tokens");
    used[static_cast<size_t>(id)] = 1;
    id_of_symbol.emplace(s, id);
    if (byte_level_to_bytes(s, byte_of_cp, bytes)) {
      text_of_id_[static_cast<size_t>(id)] = bytes;
      id_of_bytes_.emplace(bytes, id);
    } else {
      text_of_id_[static_cast<size_t>(id)] = s;  // not byte-level: decodes to its own text, as in HF
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of_bytes_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    if (it == id_of_bytes_.end()) {
      std::string symbol;
      append_utf8(symbol, byte_to_unicode(static_cast<uint8_t>(b)));
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw UserError(origin_ + ": model.vocab lacks '" + symbol + "', the byte-level symbol of byte " + hex +
                      ": not a byte-level BPE vocabulary");
    }
    byte_id_[b] = it->second;
  }

  merges_ = MergeTable(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string &left = spec.merges[r].first, &right = spec.merges[r].second;
    const auto where = [&] {
      return origin_ + ": model.merges[" + std::to_string(r) + "] ('" + left + " " + right + "')";
    };
    const auto l = id_of_symbol.find(left), rt = id_of_symbol.find(right);
    if (l == id_of_symbol.end()) throw UserError(where() + ": '" + left + "' is not in model.vocab");
    if (rt == id_of_symbol.end()) throw UserError(where() + ": '" + right + "' is not in model.vocab");
    const auto merged = id_of_symbol.find(left + right);
    if (merged == id_of_symbol.end())
      throw UserError(where() + ": the merged token '" + left + right + "' is not in model.vocab");
    merges_.insert(l->second, rt->second, {static_cast<int32_t>(r), merged->second});
  }

  for (const auto& a : spec.added) {
    if (a.id < 0) throw UserError(origin_ + ": added_tokens: '" + a.content + "' has a negative id");
    if (a.content.empty())
      throw UserError(origin_ + ": added_tokens: id " + std::to_string(a.id) + " has no content");
    text_of_id_[static_cast<size_t>(a.id)] = a.content;
    if (!a.special) matched_added_.push_back(a);
  }

  for (size_t i = 0; i < spec.stages.size(); ++i) {
    const BpeSpec::Stage& st = spec.stages[i];
    if (st.add_prefix_space) {
      if (i != 0)
        throw UserError(origin_ +
                        ": pre_tokenizer: ByteLevel's add_prefix_space after another pre-tokenizer is "
                        "not supported");
      add_prefix_space_ = true;
    }
    Stage stage;
    stage.remove_matches = st.remove_matches;
    if (!st.pattern.empty())
      stage.regex = std::make_unique<PretokenRegex>(st.pattern, origin_ + ": pre_tokenizer");
    stages_.push_back(std::move(stage));
  }
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  if (matched_added_.empty()) {
    encode_segment(text, out);
    return out;
  }
  // Leftmost occurrence of any added token, the longest one where several start there.
  size_t at = 0;
  while (at < text.size()) {
    size_t best = std::string_view::npos, best_len = 0;
    int32_t best_id = -1;
    for (const auto& a : matched_added_) {
      const size_t p = text.find(a.content, at);
      if (p < best || (p == best && a.content.size() > best_len)) {
        best = p;
        best_len = a.content.size();
        best_id = a.id;
      }
    }
    if (best == std::string_view::npos) break;
    encode_segment(text.substr(at, best - at), out);
    out.push_back(best_id);
    at = best + best_len;
  }
  encode_segment(text.substr(at), out);
  return out;
}

void ByteLevelBpe::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  for (size_t at = 0; at < text.size();) {
    const size_t run = valid_utf8_run(text, at);
    if (run > 0) {
      const std::string_view valid = text.substr(at, run);
      if (add_prefix_space_ && at == 0 && valid.front() != ' ')
        split(0, " " + std::string(valid), out);
      else
        split(0, valid, out);
      at += run;
    }
    if (at < text.size()) out.push_back(byte_id_[static_cast<unsigned char>(text[at++])]);  // not UTF-8
  }
}

void ByteLevelBpe::split(size_t stage, std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (stage == stages_.size()) return encode_piece(piece, out);
  const Stage& st = stages_[stage];
  if (!st.regex) return split(stage + 1, piece, out);
  size_t pos = 0, begin = 0, end = 0;
  while (st.regex->find(piece, pos, begin, end)) {
    if (begin > pos)
      split(stage + 1, piece.substr(pos, begin - pos), out);  // the gap: a piece too (Isolated)
    if (!st.remove_matches) split(stage + 1, piece.substr(begin, end - begin), out);
    pos = end;
  }
  if (pos < piece.size()) split(stage + 1, piece.substr(pos), out);
}

void ByteLevelBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    const auto it = id_of_bytes_.find(piece);
    if (it != id_of_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > CACHED_PIECE_BYTES) return merge(piece, out);
  thread_local PieceCache cache;
  if (cache.owner != serial_) {
    cache.ids.clear();
    cache.owner = serial_;
  }
  const auto it = cache.ids.find(piece);
  if (it != cache.ids.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge(piece, out);
  if (cache.ids.size() >= CACHE_ENTRIES) cache.ids.clear();
  cache.ids.emplace(std::string(piece),
                    std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

void ByteLevelBpe::merge(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols as a doubly linked list over the bytes; a merged-away symbol has id -1.
  struct Symbol {
    int32_t id, prev, next;
  };
  // A pair that may merge: the merge's rank, and the position of its left symbol.
  struct Candidate {
    int32_t rank, pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(piece.size());
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i)
    symbols[static_cast<size_t>(i)] = {byte_id_[static_cast<unsigned char>(piece[static_cast<size_t>(i)])],
                                       i - 1, i + 1 < n ? i + 1 : -1};
  const auto merge_at = [&](int32_t pos) -> const MergeTable::Merge* {
    const Symbol& a = symbols[static_cast<size_t>(pos)];
    return a.next < 0 ? nullptr : merges_.find(a.id, symbols[static_cast<size_t>(a.next)].id);
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const MergeTable::Merge* m = merge_at(i)) heap.push_back({m->rank, i});
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  const auto push = [&](int32_t pos) {
    if (const MergeTable::Merge* m = merge_at(pos)) {
      heap.push_back({m->rank, pos});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& a = symbols[static_cast<size_t>(c.pos)];
    if (a.id < 0) continue;
    // Stale when either symbol has merged since: the pair now there has another rank, or none.
    const MergeTable::Merge* m = merge_at(c.pos);
    if (!m || m->rank != c.rank) continue;
    Symbol& b = symbols[static_cast<size_t>(a.next)];
    a.id = m->id;
    a.next = b.next;
    if (b.next >= 0) symbols[static_cast<size_t>(b.next)].prev = c.pos;
    b.id = -1;
    if (a.prev >= 0) push(a.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next)
    out.push_back(symbols[static_cast<size_t>(i)].id);
}

std::string ByteLevelBpe::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw UserError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(vocab_size()) + " (" + origin_ + ")");
  return text_of_id_[static_cast<size_t>(id)];
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_text(id);
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_level_bpe(const BpeSpec& spec) {
  return std::make_unique<ByteLevelBpe>(spec);
}

}  // namespace hpc::text
