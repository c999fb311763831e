// The documents of `hpcdata pack --from text --tokenizer`, read in batches.
//
// A document is a whole file (--doc-sep file) or one line (--doc-sep line:
// without its "\n" and a "\r" before it; empty lines are no documents). A
// batch holds whole documents, about BATCH_BYTES of text (a larger file is
// one batch of its own), and where they came from, so that a worker can
// encode it alone and an error can name the file and byte offset.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hpc::data_tools {

enum class DocSep { File, Line };

struct TextBatch {
  int64_t seq = 0;  // batches are numbered in input order
  std::string text;
  struct Doc {
    size_t offset = 0, size = 0;  // in text
    int64_t file_offset = 0;      // of its first byte in its file
  };
  std::vector<Doc> docs;
  std::string file;  // every document of a batch comes from one file
};

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, DocSep sep);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next batch, or false when every file is read. UserError on a read error.
  bool next(TextBatch& batch);
  int64_t bytes_read() const { return bytes_read_; }
  int64_t total_bytes() const { return total_bytes_; }

  static constexpr size_t BATCH_BYTES = size_t(1) << 20;

 private:
  bool open_next_file();

  std::vector<std::string> files_;
  DocSep sep_;
  size_t file_index_ = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> in_{nullptr, std::fclose};
  int64_t file_pos_ = 0;  // bytes of the current file taken so far
  std::string carry_;     // the start of a line the previous block ended inside
  int64_t seq_ = 0, bytes_read_ = 0, total_bytes_ = 0;
};

}  // namespace hpc::data_tools
