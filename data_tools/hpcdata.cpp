// hpcdata: the command line of the data tools (pack, synth, inspect, repack).
//
// Parsing is hand-written on purpose: a handful of flags per command, and
// every mistake must become one "hpcdata: …" line with exit 2. Errors from
// the commands arrive as hpc::Error and leave through the same door.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"
#include "config/config.h"
#include "core/error.h"

namespace {

using hpc::UserError;
using namespace hpc::data_tools;

constexpr const char* USAGE =
    R"(hpcdata: pack datasets into hpctrain's HDF5 layout, make synthetic ones, inspect and repack them

usage:
  hpcdata pack --from mnist-idx DIR -o OUT.h5 [--val-fraction F] [--force]
  hpcdata pack --from cifar10-bin DIR|FILE... [--val FILE...] -o OUT.h5 [--val-fraction F] [--force]
  hpcdata pack --from npy X.npy Y.npy [--val VX.npy VY.npy] -o OUT.h5 [--classes K]
               [--scale S --mean M --std D] [--val-fraction F] [--force]
  hpcdata pack --from csv FILE [--val FILE] -o OUT.h5 [--label-col C | --targets K] [--delimiter D]
               [--classes K] [--val-fraction F] [--force]
  hpcdata pack --from text FILE... [--val FILE...] -o OUT.h5 [--val-fraction F] [--context T] [--force]
               [--tokenizer tokenizer.json|FILE.model [--doc-sep file|line] [--threads N]]
  hpcdata pack --from tokens-bin FILE... [--val FILE...] -o OUT.h5 [--vocab V] [--tokenizer NAME]
               [--layout auto|raw|llmc] [--val-fraction F] [--context T] [--force]
  hpcdata pack --from image-folder DIR [--val DIR] -o OUT.h5 [--store jpeg|raw] [--size S|HxW]
               [--max-side S] [--quality Q] [--threads N] [--on-error fail|skip] [--val-fraction F] [--force]
  hpcdata synth -o OUT.h5 [--samples N] [--val N] [--shape 1x28x28] [--classes K | --regression K]
                [--dtype uint8|float32] [--noise S] [--seed S] [--force]
  hpcdata inspect FILE
  hpcdata repack IN OUT [--force]
  hpcdata --help | --version

Every output is written to OUT.tmp-PID and renamed when complete; on any
error nothing is left behind. Datasets are contiguous, little-endian and
4 KiB-aligned, so hpctrain memory-maps them. An existing OUT needs --force.

pack --from mnist-idx DIR
  DIR holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
  and t10k-labels-idx1-ubyte, each plain or .gz (MNIST, Fashion-MNIST, EMNIST digits).
  x uint8 [N,1,28,28] with scale=1/255 mean=0.1307 std=0.3081, y int32, num_classes=10;
  /val is t10k unless --val-fraction is given (t10k is then not read).
pack --from cifar10-bin DIR|FILE...
  The CIFAR-10 binary version: 3073-byte records (label, 3x32x32 bytes). DIR: train =
  data_batch_1..5.bin, val = test_batch.bin. x uint8 [N,3,32,32], scale=1/255 and the
  training pixels' mean and std; y int32, num_classes=10.
pack --from npy X.npy Y.npy
  X: N x ... of uint8 (kept) or any int/float (stored as float32). Y: N integer class
  ids (int32, num_classes = --classes or largest + 1) or N x k floats (regression).
  uint8 X gets --scale (default 1/255) and --mean/--std (default: the data's).
pack --from csv FILE
  One sample per line, numeric cells; a first line with a non-number is a header.
  Features: every column but the label (default the last; --label-col INDEX|NAME),
  stored as float32 [N, F]; or --targets K: the last K columns are float32 targets.
  Files may be gzipped. --delimiter ',' by default.
pack --from text FILE...
  Language-model data: the files' bytes, concatenated, are the tokens (byte-level
  tokenizer: lossless, vocabulary 256), stored as uint16 /train/tokens and /val/tokens
  with vocab_size=256 tokenizer=byte. /val is the last --val-fraction of the text
  (default 0.05), or the --val files; each split must hold one window of --context + 1
  tokens (default 64, gpt-tiny's context). hpctrain cuts them into model.context windows.
  --tokenizer FILE encodes with a real vocabulary instead: a Hugging Face tokenizer.json
  of byte-level BPE (GPT-2, Llama 3, Qwen) or a SentencePiece .model. Each document (a
  file, or with --doc-sep line a line) becomes [bos] ids [eos] with the tokenizer's own
  bos/end-of-text tokens; --threads N encode in parallel (default: one per core). Ids
  are uint16, or uint32 above 65,536 tokens; the tokenizer file is stored in /tokenizer
  with its name, vocab_size, bos_id and eos_id.
pack --from tokens-bin FILE...
  Token ids from another tokenizer: nanoGPT's raw uint16 .bin files, or llm.c's shards
  (a 256-int32 header: magic 20240520, version 1, token count; then uint16 ids),
  told apart by the magic (--layout raw|llmc forces one). Ids must be < --vocab
  (default 50257, GPT-2); stored as uint16 with vocab_size and tokenizer (--tokenizer,
  default gpt2). /val as for text: the --val files or the last --val-fraction (0.05).
pack --from image-folder DIR
  Folders of JPEG/PNG files, one per class (DIR/CLASS/*.jpg, torchvision's ImageFolder);
  classes sorted by name, their names in the y attribute 'classes'. --store jpeg (default):
  the files' bytes in /train/images with an offsets index, decoded by hpctrain's loader
  (samples of --size, default 224, unless training asks random_resized_crop:SIZE); with
  --max-side S and/or --quality Q (default 90) every image is re-encoded as JPEG, its
  longer side at most S. --store raw --size S|HxW: decoded, resized (PIL's bilinear) and
  stored as uint8 [N,3,H,W]. Gray, CMYK, palette and alpha images become RGB. Mean and std
  per channel of the training pixels. --threads (default: all cores) decode in parallel;
  a file that is not an image ends the run, or is skipped and counted (--on-error skip).
common pack options
  -o, --output FILE   the output
  --force             replace FILE if it exists
  --val-fraction F    /val = a fixed-seed random fraction F of the training input
  --val ...           a separate validation input of the same kind

synth
  A learnable synthetic set (class prototypes + Gaussian noise, or y = W.x + noise),
  every value a function of --seed: --samples 10000 train, --val samples/5, --shape
  1x28x28, --classes 10 (or --regression K targets), --dtype uint8, --noise 1
  (classification) / 0.1 (regression), --seed 0.

inspect FILE
  Lists every dataset (dtype, shape, layout and offset, whether hpctrain can mmap it,
  attributes, class histogram), then validates each split as hpctrain would
  (all values scanned).

repack IN OUT
  Rewrites every split of a valid file contiguous and 4 KiB-aligned (chunked or
  compressed or big-endian files become memory-mappable); dtypes and attributes kept.
  OUT may equal IN (with --force).

exit codes: 0 ok, 2 bad input or usage, 74 output disk full
)";

[[noreturn]] void usage_error(const std::string& msg) { throw UserError(msg + " (see hpcdata --help)"); }

bool is_help(const std::string& a) { return a == "-h" || a == "--help"; }

bool matches(const std::string& arg, const std::string& name) {
  return arg == name || arg.compare(0, name.size() + 1, name + "=") == 0;
}

// "--name value" or "--name=value"; advances i past the value.
std::string option_value(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  const std::string& a = args[i];
  if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0)
    return a.substr(name.size() + 1);
  if (i + 1 >= args.size()) usage_error(name + " needs a value");
  return args[++i];
}

double parse_double(const std::string& name, const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  usage_error(name + " expects a number, got '" + s + "'");
}

int64_t parse_int(const std::string& name, const std::string& s, int64_t min) {
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  usage_error(name + " expects an integer >= " + std::to_string(min) + ", got '" + s + "'");
}

hpc::Shape parse_shape(const std::string& s) {
  std::vector<int64_t> dims;
  size_t start = 0;
  for (;;) {
    const size_t x = s.find('x', start);
    dims.push_back(
        parse_int("--shape", s.substr(start, x == std::string::npos ? std::string::npos : x - start), 1));
    if (x == std::string::npos) return hpc::Shape(dims);
    start = x + 1;
  }
}

// The options every writing command shares; returns false when `a` is none of them.
bool output_option(const std::vector<std::string>& args, size_t& i, std::string& out, bool& force) {
  const std::string& a = args[i];
  if (matches(a, "--output"))
    out = option_value(args, i, "--output");
  else if (a == "-o")
    out = option_value(args, i, "-o");
  else if (a == "--force")
    force = true;
  else
    return false;
  return true;
}

// Every pack option given must apply to the --from format (and --doc-sep, and --threads of text, to a
// tokenizer):
// one that would be ignored is a usage error, never silently dropped.
void check_applies(const std::vector<std::string>& given, const PackOptions& opt) {
  struct Rule {
    const char* option;
    std::vector<std::string> formats;
  };
  static const Rule rules[] = {
      {"--label-col", {"csv"}},
      {"--targets", {"csv"}},
      {"--delimiter", {"csv"}},
      {"--classes", {"npy", "csv"}},
      {"--scale", {"npy"}},
      {"--mean", {"npy"}},
      {"--std", {"npy"}},
      {"--context", {"text", "tokens-bin"}},
      {"--vocab", {"tokens-bin"}},
      {"--layout", {"tokens-bin"}},
      {"--tokenizer", {"text", "tokens-bin"}},
      {"--doc-sep", {"text"}},
      {"--threads", {"text", "image-folder"}},
  };
  for (const std::string& g : given)
    for (const Rule& r : rules) {
      if (g != r.option) continue;
      if (std::find(r.formats.begin(), r.formats.end(), opt.from) == r.formats.end()) {
        std::string list;
        for (const std::string& f : r.formats) list += (list.empty() ? "" : " and ") + f;
        usage_error(g + " applies to pack --from " + list + " only");
      }
      if ((g == "--doc-sep" || (g == "--threads" && opt.from == "text")) && opt.tokenizer.empty())
        usage_error(g +
                    " applies to pack --from text with --tokenizer only (byte-level text has no documents)");
    }
}

int cmd_pack(const std::vector<std::string>& args) {
  PackOptions opt;
  bool in_val = false;             // positional arguments after --val belong to the validation input
  std::vector<std::string> given;  // the options on the command line, for check_applies
  bool image_options = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (is_help(a)) {
      std::fputs(USAGE, stdout);
      return 0;
    }
    if (!a.empty() && a[0] == '-' && a != "-") {
      in_val = false;
      given.push_back(a.substr(0, a.find('=')));
    }
    if (output_option(args, i, opt.out, opt.force)) continue;
    if (matches(a, "--from")) {
      opt.from = option_value(args, i, "--from");
    } else if (matches(a, "--val-fraction")) {
      opt.val_fraction = parse_double("--val-fraction", option_value(args, i, "--val-fraction"));
    } else if (a == "--val") {
      in_val = true;
    } else if (matches(a, "--label-col")) {
      opt.label_col = option_value(args, i, "--label-col");
    } else if (matches(a, "--targets")) {
      opt.targets = parse_int("--targets", option_value(args, i, "--targets"), 1);
    } else if (matches(a, "--delimiter")) {
      const std::string d = option_value(args, i, "--delimiter");
      if (d == "\\t" || d == "tab")
        opt.delimiter = '\t';
      else if (d.size() == 1)
        opt.delimiter = d[0];
      else
        usage_error("--delimiter expects one character, got '" + d + "'");
    } else if (matches(a, "--classes")) {
      opt.classes = parse_int("--classes", option_value(args, i, "--classes"), 1);
    } else if (matches(a, "--scale")) {
      opt.scale = parse_double("--scale", option_value(args, i, "--scale"));
    } else if (matches(a, "--mean")) {
      opt.mean = parse_double("--mean", option_value(args, i, "--mean"));
    } else if (matches(a, "--context")) {
      opt.context = parse_int("--context", option_value(args, i, "--context"), 1);
    } else if (matches(a, "--vocab")) {
      opt.vocab = parse_int("--vocab", option_value(args, i, "--vocab"), 1);
    } else if (matches(a, "--tokenizer")) {
      opt.tokenizer = option_value(args, i, "--tokenizer");
      if (opt.tokenizer.empty()) usage_error("--tokenizer needs a value");
    } else if (matches(a, "--doc-sep")) {
      opt.doc_sep = option_value(args, i, "--doc-sep");
      if (opt.doc_sep != "file" && opt.doc_sep != "line")
        usage_error("--doc-sep expects file or line, got '" + opt.doc_sep + "'");
    } else if (matches(a, "--threads")) {
      opt.threads = parse_int("--threads", option_value(args, i, "--threads"), 1);
    } else if (matches(a, "--layout")) {
      opt.layout = option_value(args, i, "--layout");
    } else if (matches(a, "--std")) {
      opt.std = parse_double("--std", option_value(args, i, "--std"));
    } else if (is_image_option(a.substr(0, a.find('=')))) {
      const std::string name = a.substr(0, a.find('='));
      set_image_option(name, option_value(args, i, name), opt.images);
      image_options = true;
    } else if (!a.empty() && a[0] == '-') {
      usage_error("pack: unknown option " + a);
    } else {
      (in_val ? opt.val_inputs : opt.inputs).push_back(a);
    }
  }
  if (opt.from.empty())
    usage_error("pack needs --from mnist-idx|cifar10-bin|npy|csv|text|tokens-bin|image-folder");
  if (opt.from != "mnist-idx" && opt.from != "cifar10-bin" && opt.from != "npy" && opt.from != "csv" &&
      opt.from != "text" && opt.from != "tokens-bin" && opt.from != "image-folder")
    usage_error("pack: unknown --from " + opt.from +
                "; use mnist-idx, cifar10-bin, npy, csv, text, tokens-bin or image-folder");
  if (image_options && opt.from != "image-folder")
    usage_error("--store, --size, --max-side, --quality and --on-error apply to pack --from image-folder");
  if (opt.inputs.empty()) usage_error("pack --from " + opt.from + " needs its input");
  check_applies(given, opt);
  if (opt.from == "image-folder" && opt.threads > 0)
    set_image_option("--threads", std::to_string(opt.threads), opt.images);
  if (opt.out.empty()) usage_error("pack needs -o OUT.h5");
  if (opt.std && *opt.std == 0) usage_error("--std must not be 0");
  pack(opt);
  return 0;
}

int cmd_synth(const std::vector<std::string>& args) {
  SynthOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (is_help(a)) {
      std::fputs(USAGE, stdout);
      return 0;
    }
    if (output_option(args, i, opt.out, opt.force)) continue;
    if (matches(a, "--samples")) {
      opt.samples = parse_int("--samples", option_value(args, i, "--samples"), 1);
    } else if (matches(a, "--val")) {
      opt.val = parse_int("--val", option_value(args, i, "--val"), 0);
    } else if (matches(a, "--shape")) {
      opt.shape = parse_shape(option_value(args, i, "--shape"));
    } else if (matches(a, "--classes")) {
      opt.classes = parse_int("--classes", option_value(args, i, "--classes"), 2);
    } else if (matches(a, "--regression")) {
      opt.regression = parse_int("--regression", option_value(args, i, "--regression"), 1);
    } else if (matches(a, "--dtype")) {
      const std::string t = option_value(args, i, "--dtype");
      if (t == "uint8")
        opt.dtype = hpc::DType::U8;
      else if (t == "float32")
        opt.dtype = hpc::DType::F32;
      else
        usage_error("--dtype expects uint8 or float32, got '" + t + "'");
    } else if (matches(a, "--noise")) {
      opt.noise = parse_double("--noise", option_value(args, i, "--noise"));
      if (!(opt.noise >= 0)) usage_error("--noise must be >= 0");
    } else if (matches(a, "--seed")) {
      opt.seed = static_cast<uint64_t>(parse_int("--seed", option_value(args, i, "--seed"), 0));
    } else {
      usage_error("synth: unknown " + std::string(!a.empty() && a[0] == '-' ? "option " : "argument ") + a);
    }
  }
  if (opt.out.empty()) usage_error("synth needs -o OUT.h5");
  synth(opt);
  return 0;
}

int cmd_repack(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  std::string out;
  bool force = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_help(args[i])) {
      std::fputs(USAGE, stdout);
      return 0;
    }
    if (output_option(args, i, out, force)) continue;
    if (!args[i].empty() && args[i][0] == '-') usage_error("repack: unknown option " + args[i]);
    files.push_back(args[i]);
  }
  if (!out.empty()) files.push_back(out);
  if (files.size() != 2) usage_error("usage: hpcdata repack IN OUT [--force]");
  repack(files[0], files[1], force);
  return 0;
}

int cmd_inspect(const std::vector<std::string>& args) {
  if (args.size() == 1 && is_help(args[0])) {
    std::fputs(USAGE, stdout);
    return 0;
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') usage_error("usage: hpcdata inspect FILE");
  return inspect_file(args[0]);
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) usage_error("no command given");
  const std::string& cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (is_help(cmd) || cmd == "help") {
    std::fputs(USAGE, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("hpcdata %s (%s)\n", hpc::hpctrain_version(), hpc::hpctrain_commit());
    return 0;
  }
  if (cmd == "pack") return cmd_pack(rest);
  if (cmd == "synth") return cmd_synth(rest);
  if (cmd == "inspect") return cmd_inspect(rest);
  if (cmd == "repack") return cmd_repack(rest);
  usage_error(std::string(cmd[0] == '-' ? "unknown option " : "unknown command ") + cmd);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const hpc::Error& e) {
    std::fprintf(stderr, "hpcdata: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpcdata: internal error: %s\n", e.what());
    return hpc::EXIT_INTERNAL;
  }
}
