// hpcdata pack --from text FILE... --tokenizer TOK: text → token ids of a real vocabulary.
//
// The documents (text_documents.h) are encoded by --threads workers, batch by
// batch, and their tokens written in input order, each document as
// [bos] ids [eos] with the tokenizer's bos and end-of-text tokens where it
// has them (GPT-2: ids <|endoftext|>; Llama 3: <|begin_of_text|> ids
// <|end_of_text|>; a SentencePiece model: <s> ids </s>), the convention of
// torchtitan's and nanoGPT's data preparation.
//
// The number of tokens is known only at the end, but an mmappable dataset
// must be created with its size: the tokens go first to a spool file in the
// output's directory (unlinked at once, so nothing is left behind whatever
// happens), then into /train/tokens and /val/tokens. The ids are uint16 when
// the vocabulary has at most 65,536 tokens, else uint32. /val is the --val
// files, or the last --val-fraction of the stream, as for byte-level text.
// The tokenizer file itself goes into /tokenizer (text/stored.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "text/stored.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text_documents.h"

namespace hpc::data_tools {

namespace {

constexpr double DEFAULT_VAL_FRACTION = 0.05;
constexpr int64_t UINT16_VOCAB = 65536;

// An unlinked temporary file in `dir`: gone when closed, whatever happens.
class Spool {
 public:
  Spool(const std::string& out_path, size_t token_bytes) : token_bytes_(token_bytes) {
    const std::filesystem::path dir = std::filesystem::path(out_path).parent_path();
    std::string pattern = (dir.empty() ? std::string(".") : dir.string()) + "/.hpcdata-tokens-XXXXXX";
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0)
      throw UserError("cannot create a spool file in " + pattern + " (" + std::strerror(errno) + ")");
    ::unlink(pattern.c_str());
  }
  ~Spool() { ::close(fd_); }
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  void append(const std::vector<int32_t>& ids) {
    buf_.resize(ids.size() * token_bytes_);
    if (token_bytes_ == 2)
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto v = static_cast<uint16_t>(ids[i]);
        std::memcpy(buf_.data() + 2 * i, &v, 2);
      }
    else
      std::memcpy(buf_.data(), ids.data(), buf_.size());
    for (size_t done = 0; done < buf_.size();) {
      const ssize_t n = ::write(fd_, buf_.data() + done, buf_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw IoError(std::string("writing the token spool file failed (") + std::strerror(errno) + ")");
      done += static_cast<size_t>(n);
    }
    tokens_ += static_cast<int64_t>(ids.size());
  }
  // Tokens [first, first + n) into out (n · token_bytes bytes).
  void read(int64_t first, int64_t n, void* out) const {
    const size_t bytes = static_cast<size_t>(n) * token_bytes_;
    for (size_t done = 0; done < bytes;) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(out) + done, bytes - done,
                                  static_cast<off_t>(static_cast<size_t>(first) * token_bytes_ + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw IoError(std::string("reading the token spool file failed (") + std::strerror(errno) + ")");
      done += static_cast<size_t>(got);
    }
  }
  int64_t tokens() const { return tokens_; }

 private:
  int fd_ = -1;
  size_t token_bytes_;
  int64_t tokens_ = 0;
  std::vector<char> buf_;
};

// Shows how far the encoding is on a terminal (stderr), at most 5 times a second.
class Progress {
 public:
  explicit Progress(int64_t total_bytes) : total_(total_bytes), on_(::isatty(STDERR_FILENO) != 0) {}
  void update(int64_t bytes, int64_t tokens, bool force = false) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double frac = total_ > 0 ? double(bytes) / double(total_) : 1.0;
    constexpr int WIDTH = 30;
    const int filled = static_cast<int>(frac * WIDTH);
    std::fprintf(stderr, "\rtokenizing [%s%s] %3.0f%%  %.1f / %.1f MB  %.1f MB/s  %lld tokens ",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(WIDTH - filled), '.').c_str(), 100 * frac,
                 double(bytes) / 1e6, double(total_) / 1e6, s > 0 ? double(bytes) / 1e6 / s : 0.0,
                 static_cast<long long>(tokens));
  }
  void done() {
    if (on_) std::fputs("\r\033[K", stderr);
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  int64_t total_;
  bool on_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

struct Encoded {
  std::vector<int32_t> ids;
  int64_t docs = 0;
};

// Encodes one batch: each document as [bos] ids [eos].
Encoded encode_batch(const text::Tokenizer& tok, const TextBatch& batch) {
  Encoded out;
  out.ids.reserve(batch.text.size() / 3 + 2 * batch.docs.size());
  const std::optional<int32_t> bos = tok.bos_id(), eos = tok.eos_id();
  for (const TextBatch::Doc& d : batch.docs) {
    const std::string_view doc(batch.text.data() + d.offset, d.size);
    if (!tok.accepts_any_bytes()) {
      const size_t bad = text::first_invalid_utf8(doc);
      if (bad != std::string_view::npos)
        throw UserError(batch.file + ": not UTF-8 at byte " +
                        std::to_string(d.file_offset + static_cast<int64_t>(bad)) + ", and the tokenizer (" +
                        tok.name() + ") has no byte fallback");
    }
    if (bos) out.ids.push_back(*bos);
    const std::vector<int32_t> ids = tok.encode(doc);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    if (eos) out.ids.push_back(*eos);
    ++out.docs;
  }
  return out;
}

// Encodes every document of `files` on `threads` workers into the spool, in input order.
// Returns the number of documents.
int64_t encode_files(const text::Tokenizer& tok, const std::vector<std::string>& files, DocSep sep,
                     int threads, Spool& spool, Progress& progress, int64_t& bytes_done) {
  DocumentReader reader(files, sep);
  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<TextBatch> work;
  std::map<int64_t, Encoded> done;
  std::exception_ptr failure;
  bool reading_done = false;
  const size_t max_in_flight = 2 * static_cast<size_t>(threads) + 2;

  const auto worker = [&] {
    for (;;) {
      TextBatch batch;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return !work.empty() || reading_done || failure; });
        if (failure || work.empty()) return;
        batch = std::move(work.front());
        work.pop_front();
      }
      try {
        Encoded e = encode_batch(tok, batch);
        const std::lock_guard<std::mutex> lock(mu);
        done.emplace(batch.seq, std::move(e));
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
      }
      done_cv.notify_all();
    }
  };
  std::vector<std::jthread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  // Any exit, normal or by exception, stops and joins the workers (jthread joins on destruction).
  struct Stop {
    std::mutex& mu;
    std::condition_variable& cv;
    bool& flag;
    ~Stop() {
      {
        const std::lock_guard<std::mutex> lock(mu);
        flag = true;
      }
      cv.notify_all();
    }
  } stop{mu, work_cv, reading_done};

  int64_t next_seq = 0, submitted = 0, docs = 0;
  const int64_t bytes_before = bytes_done;
  bool more = true;
  while (more || next_seq < submitted) {
    // Keep the workers busy, with a bounded number of batches in memory.
    while (more && static_cast<size_t>(submitted - next_seq) < max_in_flight) {
      TextBatch batch;
      more = reader.next(batch);
      if (!more) break;
      {
        const std::lock_guard<std::mutex> lock(mu);
        work.push_back(std::move(batch));
      }
      ++submitted;
      work_cv.notify_one();
    }
    if (next_seq == submitted) continue;
    Encoded e;
    {
      std::unique_lock<std::mutex> lock(mu);
      done_cv.wait(lock, [&] { return failure || done.count(next_seq); });
      if (failure) std::rethrow_exception(failure);
      e = std::move(done.at(next_seq));
      done.erase(next_seq);
    }
    spool.append(e.ids);
    docs += e.docs;
    ++next_seq;
    bytes_done = bytes_before + reader.bytes_read();
    progress.update(bytes_done, spool.tokens());
  }
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (failure) std::rethrow_exception(failure);
  }
  return docs;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string describe_token(const text::Tokenizer& tok, int32_t id) {
  return tok.token_text(id) + " (" + std::to_string(id) + ")";
}

}  // namespace

void write_stored_tokenizer(DatasetWriter& w, const text::StoredTokenizer& st,
                            const std::vector<std::string>& splits) {
  const std::string name = text::STORED_TOKENIZER;
  w.write(name, st.bytes.data(), DType::U8, Shape{static_cast<int64_t>(st.bytes.size())});
  w.set_attr(name, "format", st.format);
  w.set_attr(name, "name", st.name);
  w.set_attr(name, "file", st.file);
  w.set_attr(name, "vocab_size", st.vocab_size);
  std::vector<std::string> carriers = splits;
  carriers.push_back(name);
  for (const std::string& c : carriers) {
    w.set_attr(c, "bos_id", st.bos_id);
    w.set_attr(c, "eos_id", st.eos_id);
  }
}

void pack_text_tokenized(DatasetWriter& w, const PackOptions& opt) {
  const std::string tok_bytes = read_file(opt.tokenizer);
  const std::unique_ptr<text::Tokenizer> tok = text::Tokenizer::from_bytes(tok_bytes, opt.tokenizer);
  const DocSep sep = opt.doc_sep == "line" ? DocSep::Line : DocSep::File;
  const int threads = opt.threads > 0 ? static_cast<int>(opt.threads)
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int64_t vocab = tok->vocab_size();
  // Above 65,536 tokens: int32 in memory, uint32 in the file.
  const DType dtype = vocab <= UINT16_VOCAB ? DType::U16 : DType::I32;
  const bool wide = dtype == DType::I32;

  Spool spool(w.path(), dtype_size(dtype));
  int64_t total = 0;
  for (const auto* files : {&opt.inputs, &opt.val_inputs}) total += DocumentReader(*files, sep).total_bytes();
  Progress progress(total);
  int64_t bytes_done = 0;
  const int64_t docs = encode_files(*tok, opt.inputs, sep, threads, spool, progress, bytes_done);
  const int64_t n = spool.tokens();
  int64_t val_docs = 0;
  if (!opt.val_inputs.empty())
    val_docs = encode_files(*tok, opt.val_inputs, sep, threads, spool, progress, bytes_done);
  const int64_t n_extra_val = spool.tokens() - n;
  progress.update(bytes_done, spool.tokens(), true);
  progress.done();
  const double seconds = progress.seconds();

  const int64_t window = opt.context + 1;
  if (docs == 0)
    throw UserError("pack --from text: no text (no document in " + opt.inputs.front() +
                    (opt.inputs.size() > 1 ? ", …" : "") + ")");
  if (!opt.val_inputs.empty() && n_extra_val < window)
    throw UserError("pack --from text: the --val text gives " + std::to_string(n_extra_val) +
                    " tokens, fewer than one window of " + std::to_string(window) + " (--context " +
                    std::to_string(opt.context) + " + 1)");
  const double fraction = opt.val_inputs.empty() ? opt.val_fraction.value_or(DEFAULT_VAL_FRACTION) : 0.0;
  const int64_t n_val = fraction > 0 ? std::max<int64_t>(window, std::llround(fraction * double(n))) : 0;
  const int64_t n_train = n - n_val;
  if (n_train < window)
    throw UserError("pack --from text: the text gives " + std::to_string(n) + " tokens, too few for " +
                    (n_val > 0 ? "a training and a validation window" : "one training window") + " of " +
                    std::to_string(window) + " tokens (--context " + std::to_string(opt.context) + " + 1)");

  const std::string train = "/train/tokens", val = "/val/tokens";
  const int64_t val_total = n_val + n_extra_val;
  w.create(train, dtype, Shape{n_train}, wide);
  if (val_total > 0) w.create(val, dtype, Shape{val_total}, wide);
  constexpr int64_t BLOCK = int64_t{1} << 20;
  std::vector<char> buf(static_cast<size_t>(BLOCK) * dtype_size(dtype));
  for (int64_t at = 0; at < spool.tokens(); at += BLOCK) {
    const int64_t count = std::min(BLOCK, spool.tokens() - at);
    spool.read(at, count, buf.data());
    // The block may straddle the train/val boundary.
    int64_t k = 0;
    while (k < count) {
      const int64_t pos = at + k, end = pos < n_train ? std::min(n_train, at + count) : at + count;
      w.write_rows(pos < n_train ? train : val, pos < n_train ? pos : pos - n_train, end - pos,
                   buf.data() + static_cast<size_t>(k) * dtype_size(dtype));
      k = end - at;
    }
  }
  text::StoredTokenizer stored;
  stored.bytes = tok_bytes;
  stored.format = tok->format();
  stored.name = tok->name();
  stored.file = std::filesystem::path(opt.tokenizer).filename().string();
  stored.vocab_size = vocab;
  stored.bos_id = tok->bos_id().value_or(-1);
  stored.eos_id = tok->eos_id().value_or(-1);
  std::vector<std::string> splits{train};
  if (val_total > 0) splits.push_back(val);
  for (const std::string& name : splits) {
    w.set_attr(name, "vocab_size", vocab);
    w.set_attr(name, "tokenizer", tok->name());
  }
  write_stored_tokenizer(w, stored, splits);
  w.commit();

  std::string separators;
  if (tok->bos_id()) separators += "starting with " + describe_token(*tok, *tok->bos_id());
  if (tok->eos_id())
    separators +=
        std::string(separators.empty() ? "" : ", ") + "ending with " + describe_token(*tok, *tok->eos_id());
  std::printf("wrote %s: train %lld tokens", w.path().c_str(), static_cast<long long>(n_train));
  if (val_total > 0) std::printf(", val %lld tokens", static_cast<long long>(val_total));
  std::printf(" (%s, %s) from %lld documents (%s, %s)\n", wide ? "uint32" : "uint16", tok->name().c_str(),
              static_cast<long long>(docs) + static_cast<long long>(val_docs),
              sep == DocSep::Line ? "one per line" : "one per file",
              separators.empty() ? "no separator token" : separators.c_str());
  std::printf("tokenized %.3g MB in %.3g s: %.3g MB/s on %d thread%s\n", double(total) / 1e6, seconds,
              seconds > 0 ? double(total) / 1e6 / seconds : 0.0, threads, threads == 1 ? "" : "s");
}

}  // namespace hpc::data_tools
