// SentencePieceTokenizer: libsentencepiece (through the plugin, sentencepiece_api.h) behind
// hpc::text::Tokenizer, with the byte-fallback rule of sentencepiece.h.
#include "text/sentencepiece.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "text/sentencepiece_api.h"
#include "text/sentencepiece_model.h"
#include "text/utf8.h"

namespace hpc::text {

namespace {

// The plugin's entry point, loaded once per process and never unloaded (models live until exit).
// Looked for beside the executable, in ../lib (an installed prefix) and in .. (build/tests/).
SentencePieceLoadFn plugin_load() {
  static std::once_flag once;
  static SentencePieceLoadFn fn = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    std::vector<std::filesystem::path> candidates;
    if (const char* env = std::getenv("HPCTRAIN_SENTENCEPIECE_PLUGIN")) candidates.emplace_back(env);
    if (!ec)
      for (const char* dir : {".", "../lib", ".."})
        candidates.push_back(exe.parent_path() / dir / SENTENCEPIECE_PLUGIN);
        // RTLD_DEEPBIND keeps libsentencepiece's bundled protobuf apart from the process's libprotobuf; the
        // sanitizers' runtimes refuse it (and their test programs do not load libprotobuf).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    constexpr int FLAGS = RTLD_NOW | RTLD_LOCAL;
#else
    constexpr int FLAGS = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
    std::string tried;
    for (const std::filesystem::path& p : candidates) {
      if (!std::filesystem::exists(p, ec)) {
        tried += (tried.empty() ? "" : ", ") + p.lexically_normal().string();
        continue;
      }
      void* handle = ::dlopen(p.c_str(), FLAGS);
      if (!handle) {
        error = "cannot load " + p.string() + " (" + ::dlerror() + ")";
        return;
      }
      fn = reinterpret_cast<SentencePieceLoadFn>(::dlsym(handle, SENTENCEPIECE_LOAD_SYMBOL));
      if (!fn) error = p.string() + " has no " + SENTENCEPIECE_LOAD_SYMBOL;
      return;
    }
    error = std::string("SentencePiece models need ") + SENTENCEPIECE_PLUGIN +
            ", built with hpctrain when libsentencepiece-dev is installed; not found (" + tried + ")";
  });
  if (!fn) throw UserError(error);
  return fn;
}

std::unique_ptr<SentencePieceModel> load_model(const std::string& bytes, const std::string& origin) {
  std::string error;
  std::unique_ptr<SentencePieceModel> m(plugin_load()(bytes.data(), bytes.size(), &error));
  if (!m || m->piece_count() <= 0) {
    // libsentencepiece's message for bytes that are no ModelProto names its source line: say it plainly.
    if (error.find("ParseFromArray") != std::string::npos)
      error = "its bytes are not a ModelProto protocol buffer";
    throw UserError(origin + ": not a SentencePiece model (" + (m ? std::string("no pieces") : error) + ")");
  }
  return m;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& model_bytes, const std::string& origin);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return sp_->piece_count(); }
  std::optional<int32_t> bos_id() const override { return special(sp_->bos_id()); }
  std::optional<int32_t> eos_id() const override { return special(sp_->eos_id()); }
  std::string name() const override {
    return "SentencePiece " + info_.model_type + " (.model, " + std::to_string(vocab_size()) + " tokens" +
           (info_.byte_fallback ? ", byte fallback" : "") + ")";
  }
  std::string format() const override { return "sentencepiece"; }
  bool accepts_any_bytes() const override { return info_.byte_fallback; }
  std::string token_text(int32_t id) const override;

 private:
  std::optional<int32_t> special(int id) const {
    return id >= 0 && id < sp_->piece_count() ? std::optional<int32_t>(id) : std::nullopt;
  }
  void check_ids(const std::vector<int32_t>& ids) const;
  void append_encoded(const SentencePieceModel& sp, std::string_view text, std::vector<int32_t>& out) const;
  std::string decode_with(const SentencePieceModel& sp, const std::vector<int>& ids) const;

  std::string origin_;
  std::unique_ptr<SentencePieceModel> sp_;  // before info_: the bytes are read as a ModelProto once it parsed
  SentencePieceModelInfo info_;
  // add_dummy_prefix off: the text after a byte that is not UTF-8 (only with byte fallback).
  std::unique_ptr<SentencePieceModel> continuation_;
  int32_t byte_piece_[256] = {};     // <0xNN> → id (byte fallback)
  std::vector<int16_t> byte_of_id_;  // id → its byte for byte pieces, else -1
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_bytes, const std::string& origin)
    : origin_(origin), sp_(load_model(model_bytes, origin)), info_(read_sentencepiece_info(model_bytes)) {
  byte_of_id_.assign(static_cast<size_t>(sp_->piece_count()), -1);
  for (int id = 0; id < sp_->piece_count(); ++id)
    if (sp_->is_byte(id)) {
      const std::string piece = sp_->piece(id);  // "<0x41>"
      const auto byte = static_cast<int16_t>(std::stoi(piece.substr(3, 2), nullptr, 16));
      byte_of_id_[static_cast<size_t>(id)] = byte;
      byte_piece_[byte] = id;
    }
  if (info_.byte_fallback) {
    if (std::count_if(byte_of_id_.begin(), byte_of_id_.end(), [](int16_t b) { return b >= 0; }) != 256)
      throw UserError(origin +
                      ": the SentencePiece model has byte fallback but not the 256 <0xNN> byte pieces");
    continuation_ =
        load_model(info_.add_dummy_prefix ? without_dummy_prefix(model_bytes) : model_bytes, origin);
  }
}

void SentencePieceTokenizer::append_encoded(const SentencePieceModel& sp, std::string_view text,
                                            std::vector<int32_t>& out) const {
  std::vector<int> ids;
  std::string error;
  if (!sp.encode(text, ids, error))
    throw UserError(origin_ + ": SentencePiece could not encode the text (" + error + ")");
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  const size_t bad = first_invalid_utf8(text);
  if (bad == std::string_view::npos) {
    append_encoded(*sp_, text, out);
    return out;
  }
  if (!info_.byte_fallback)
    throw UserError("the text is not UTF-8 at byte " + std::to_string(bad) + " and " + origin_ +
                    " has no byte fallback (SentencePiece would replace it with U+FFFD)");
  for (size_t at = 0; at < text.size();) {
    const size_t run = valid_utf8_run(text, at);
    if (run > 0) append_encoded(at == 0 ? *sp_ : *continuation_, text.substr(at, run), out);
    at += run;
    if (at < text.size()) out.push_back(byte_piece_[static_cast<unsigned char>(text[at++])]);
  }
  return out;
}

void SentencePieceTokenizer::check_ids(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= sp_->piece_count())
      throw UserError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                      std::to_string(sp_->piece_count()) + " (" + origin_ + ")");
}

std::string SentencePieceTokenizer::decode_with(const SentencePieceModel& sp,
                                                const std::vector<int>& ids) const {
  std::string text, error;
  if (!sp.decode(ids, text, error))
    throw UserError(origin_ + ": SentencePiece could not decode (" + error + ")");
  return text;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  check_ids(ids);
  // Byte pieces that do not form UTF-8 were bytes of the input that were not UTF-8 (encode's rule): each
  // is written as that byte, and the pieces between them are decoded as SentencePiece does.
  std::string out;
  std::vector<int> pending;
  bool at_start = true;
  const auto flush = [&] {
    out += decode_with(at_start || !continuation_ ? *sp_ : *continuation_, pending);
    pending.clear();
  };
  for (size_t i = 0; i < ids.size();) {
    if (byte_of_id_[static_cast<size_t>(ids[i])] < 0) {
      pending.push_back(ids[i++]);
      continue;
    }
    size_t end = i;
    std::string bytes;
    while (end < ids.size() && byte_of_id_[static_cast<size_t>(ids[end])] >= 0)
      bytes += static_cast<char>(byte_of_id_[static_cast<size_t>(ids[end++])]);
    for (size_t at = 0; at < bytes.size();) {
      const size_t run = valid_utf8_run(bytes, at);
      for (size_t k = at; k < at + run; ++k) pending.push_back(ids[i + k]);
      at += run;
      if (at < bytes.size()) {
        flush();
        out += bytes[at++];
        at_start = false;
      }
    }
    i = end;
  }
  flush();
  return out;
}

std::string SentencePieceTokenizer::token_text(int32_t id) const {
  check_ids({id});
  if (sp_->is_control(id)) return sp_->piece(id);    // <s>, </s>: decode() drops them, as SentencePiece does
  if (sp_->is_unknown(id)) return " \xE2\x81\x87 ";  // SentencePiece's " ⁇ "
  const int16_t byte = byte_of_id_[static_cast<size_t>(id)];
  if (byte >= 0) return std::string(1, static_cast<char>(byte));
  // The piece with its word-boundary marks as spaces: "▁the" is " the" wherever it comes.
  const std::string piece = sp_->piece(id);
  std::string out;
  for (size_t at = 0; at < piece.size();) {
    if (piece.compare(at, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      at += 3;
    } else {
      out += piece[at++];
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece(const std::string& model_bytes, const std::string& origin) {
  return std::make_unique<SentencePieceTokenizer>(model_bytes, origin);
}

}  // namespace hpc::text
