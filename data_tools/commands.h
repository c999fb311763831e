// The hpcdata sub-commands. Each throws hpc::UserError (one line, exit 2)
// on bad input; hpcdata.cpp owns argument parsing, --help and exit codes.
// Every command that writes a file writes it through DatasetWriter: the
// output is checked before any input is read, written to OUT.tmp-PID and
// renamed when complete, and removed on any error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "image_folder.h"
#include "pack.h"
#include "text/stored.h"

namespace hpc::data_tools {

struct PackOptions {
  std::string from;                 // mnist-idx | cifar10-bin | npy | csv | text | tokens-bin | image-folder
  std::vector<std::string> inputs;  // DIR, or the input files
  std::vector<std::string> val_inputs;  // --val: a separate validation input of the same kind
  std::string out;                      // output .h5
  bool force = false;
  // mnist-idx, cifar10-bin: unset = /val from the test files. Any format: a
  // fixed-seed random fraction of the training input (0 = no /val).
  std::optional<double> val_fraction;
  std::string label_col;  // csv: class-id column (0-based index or header name; default last)
  int64_t targets = 0;    // csv: > 0 = the last K columns are float32 regression targets
  char delimiter = ',';   // csv
  int64_t classes = 0;    // npy, csv: num_classes (0 = largest label + 1)
  std::optional<double> scale, mean, std;  // uint8 inputs of npy: attributes (default 1/255, data mean, std)
  int64_t context = 64;   // text: each split must hold a window of context + 1 tokens (gpt-tiny's context)
  int64_t vocab = 50257;  // tokens-bin: ids must be below it (GPT-2's vocabulary)
  // text: a tokenizer.json or SentencePiece .model (empty: byte-level); tokens-bin: the tokenizer
  // attribute (empty: gpt2)
  std::string tokenizer;
  std::string layout = "auto";   // tokens-bin: auto | raw (nanoGPT) | llmc (headered shards)
  std::string doc_sep = "file";  // text with a tokenizer: a document is a file | a line
  int64_t threads = 0;           // text with a tokenizer: encoding threads (0: one per core)
  ImageFolderOptions images;  // image-folder: --store, --size, --max-side, --quality, --threads, --on-error
};

// hpcdata pack: checks the options, then reads the input with the format's
// reader and writes it; prints one summary line on success.
void pack(const PackOptions& opt);

// The format readers behind pack (the output is already checked).
PackJob read_mnist_idx(const PackOptions& opt);
PackJob read_cifar10_bin(const PackOptions& opt);
PackJob read_npy(const PackOptions& opt);
PackJob read_csv(const PackOptions& opt);
// text is a token stream, not x/y rows: it writes through `w` itself and commits (pack_text.cpp;
// with --tokenizer, pack_text_tokenizer.cpp).
void pack_text(DatasetWriter& w, const PackOptions& opt);
void pack_text_tokenized(DatasetWriter& w, const PackOptions& opt);
// Writes /tokenizer (text/stored.h) and the bos_id/eos_id attributes of `splits` (pack, repack).
void write_stored_tokenizer(DatasetWriter& w, const text::StoredTokenizer& st,
                            const std::vector<std::string>& splits);
// nanoGPT / llm.c token files (pack_tokens.cpp), written and committed like text.
void pack_tokens_bin(DatasetWriter& w, const PackOptions& opt);

struct SynthOptions {
  std::string out;
  bool force = false;
  int64_t samples = 10000;  // /train
  int64_t val = -1;         // /val samples; -1 = samples / 5
  Shape shape{1, 28, 28};   // one sample
  int64_t classes = 10;     // classification (ignored with regression > 0)
  int64_t regression = 0;   // > 0: that many float32 targets y = W·x + noise
  DType dtype = DType::U8;  // x: U8 or F32
  double noise = -1;        // -1: 1.0 around class prototypes, 0.1 on regression targets
  uint64_t seed = 0;
};

// hpcdata synth: a learnable synthetic set (see synth.cpp), streamed to disk.
void synth(const SynthOptions& opt);

// hpcdata repack IN OUT: every split of a valid file rewritten contiguous,
// little-endian and 4 KiB-aligned, with its attributes.
void repack(const std::string& in, const std::string& out, bool force);

// hpcdata inspect: prints the file's datasets, then validates each split the
// way hpctrain would. Returns the exit code (0 valid, 2 not).
int inspect_file(const std::string& path);

}  // namespace hpc::data_tools
