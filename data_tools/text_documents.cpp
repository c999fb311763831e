// DocumentReader: files → batches of whole documents (text_documents.h).
#include "text_documents.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hpc::data_tools {

DocumentReader::DocumentReader(std::vector<std::string> files, DocSep sep)
    : files_(std::move(files)), sep_(sep) {
  for (const std::string& p : files_) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) throw UserError(p + ": cannot open (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) throw UserError(p + ": is a directory (give the text files in it)");
    if (!S_ISREG(st.st_mode))
      throw UserError(p + ": not a regular file (pipes and devices cannot be packed)");
    total_bytes_ += static_cast<int64_t>(st.st_size);
  }
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::open_next_file() {
  if (file_index_ >= files_.size()) return false;
  const std::string& path = files_[file_index_];
  in_.reset(std::fopen(path.c_str(), "rb"));
  if (!in_) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  file_pos_ = 0;
  carry_.clear();
  return true;
}

bool DocumentReader::next(TextBatch& batch) {
  batch.text.clear();
  batch.docs.clear();
  for (;;) {
    if (!in_ && !open_next_file()) return false;
    const std::string& path = files_[file_index_];
    batch.file = path;
    batch.seq = seq_;
    if (sep_ == DocSep::File) {
      // One document per file: the whole file, read in one go.
      std::string doc;
      char chunk[1 << 16];
      for (size_t got; (got = std::fread(chunk, 1, sizeof chunk, in_.get())) > 0;) doc.append(chunk, got);
      if (std::ferror(in_.get())) throw UserError(path + ": read error (" + std::strerror(errno) + ")");
      bytes_read_ += static_cast<int64_t>(doc.size());
      in_.reset();
      ++file_index_;
      if (doc.empty()) continue;  // an empty file is no document
      batch.text = std::move(doc);
      batch.docs.push_back({0, batch.text.size(), 0});
      ++seq_;
      return true;
    }

    // A block of the file, after the unfinished line the last one ended with.
    std::string block = std::move(carry_);
    carry_.clear();
    const int64_t block_start = file_pos_ - static_cast<int64_t>(block.size());
    const size_t old = block.size();
    block.resize(old + BATCH_BYTES);
    const size_t got = std::fread(block.data() + old, 1, BATCH_BYTES, in_.get());
    if (got < BATCH_BYTES && std::ferror(in_.get()))
      throw UserError(path + ": read error (" + std::strerror(errno) + ")");
    block.resize(old + got);
    file_pos_ += static_cast<int64_t>(got);
    bytes_read_ += static_cast<int64_t>(got);
    const bool at_eof = got < BATCH_BYTES;

    // One document per line: the block's complete lines; the last, unfinished one waits for the next block.
    size_t end = at_eof ? block.size() : block.rfind('\n');
    if (end == std::string::npos) {  // one line longer than a block: read on
      carry_ = std::move(block);
      continue;
    }
    if (!at_eof) ++end;
    carry_ = block.substr(end);
    block.resize(end);
    if (at_eof) {
      in_.reset();
      ++file_index_;
    }
    for (size_t at = 0; at < block.size();) {
      size_t nl = block.find('\n', at);
      if (nl == std::string::npos) nl = block.size();
      size_t stop = nl;
      if (stop > at && block[stop - 1] == '\r') --stop;
      if (stop > at) batch.docs.push_back({at, stop - at, block_start + static_cast<int64_t>(at)});
      at = nl + 1;
    }
    if (batch.docs.empty()) continue;
    batch.text = std::move(block);
    ++seq_;
    return true;
  }
}

}  // namespace hpc::data_tools
