// The option table (see options.h) and the name utilities built on it.
//
// Each line of option_table() binds a dotted name to a Config field through a
// small accessor lambda, together with its check and its --help text; the
// helpers below turn that into the text get/set pair every consumer uses. The
// defaults are not repeated here: they are whatever `Config{}` holds
// (config.h), read back through `get`.
#include "config/options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>

#include "data/augment.h"
#include "nn/spec.h"

namespace hpc::config {

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();
constexpr Range ANY{-INF, false, INF, false};
constexpr Range POSITIVE{0, true, INF, false};
constexpr Range NON_NEGATIVE{0, false, INF, false};
constexpr Range AT_LEAST_ONE{1, false, INF, false};
constexpr Range UNIT_HALF_OPEN{0, false, 1, true};  // [0, 1): decay rates, smoothing
constexpr Range ZERO_STAGES{0, false, 3, false};    // dist.zero: 0, 1, 2, 3

std::string preset_help() {
  std::string help = "network:";
  for (const std::string& p : nn::preset_names()) help += " " + p + ",";
  help.back() = ' ';
  return help + "(gpt-*, *llama*: language models)";
}

template <class Access>
using FieldType = std::remove_cvref_t<decltype(std::declval<Access>()(std::declval<Config&>()))>;

OptionSpec base(std::string name, std::string value_name, std::string help) {
  OptionSpec s;
  size_t dot = name.rfind('.');
  s.group = dot == std::string::npos ? "" : name.substr(0, dot);
  s.key = dot == std::string::npos ? name : name.substr(dot + 1);
  s.name = std::move(name);
  s.value_name = std::move(value_name);
  s.help = std::move(help);
  return s;
}

template <class Access>
OptionSpec number(std::string name, Access acc, Range range, std::string help) {
  using T = FieldType<Access>;
  OptionSpec s = base(std::move(name), std::is_floating_point_v<T> ? "FLOAT" : "INT", std::move(help));
  s.get = [acc](const Config& c) {
    if constexpr (std::is_floating_point_v<T>)
      return format_float(acc(c));
    else
      return std::to_string(acc(c));
  };
  s.set = [acc, range](Config& c, const std::string& text) {
    if constexpr (std::is_floating_point_v<T>) {
      double v = parse_float(text);
      check_range(v, range, text);
      acc(c) = v;
    } else if constexpr (std::is_unsigned_v<T>) {
      acc(c) = parse_uint(text);
    } else {
      int64_t v = parse_int(text);
      check_range(static_cast<double>(v), range, text);
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
        throw BadValue("integer out of range: '" + text + "'");
      acc(c) = static_cast<T>(v);
    }
  };
  return s;
}

template <class Access>
OptionSpec flag(std::string name, Access acc, std::string help) {
  OptionSpec s = base(std::move(name), "BOOL", std::move(help));
  s.get = [acc](const Config& c) -> std::string { return acc(c) ? "true" : "false"; };
  s.set = [acc](Config& c, const std::string& text) { acc(c) = parse_bool(text); };
  return s;
}

// One of a fixed list of names: the presets nn knows.
template <class Access>
OptionSpec name_choice(std::string name, Access acc, const std::vector<std::string>& choices,
                       std::string help, const std::string& value_name) {
  OptionSpec s = base(std::move(name), value_name, std::move(help));
  s.choices = choices;
  s.get = [acc](const Config& c) { return acc(c); };
  s.set = [acc, choices](Config& c, const std::string& text) { acc(c) = parse_choice(text, choices); };
  return s;
}

// A model.spec replaces the preset: the preset's value is then without effect.
OptionSpec unused_when_spec(OptionSpec s) {
  s.unused = [](const Config& c) -> const char* {
    return c.model.spec.empty() ? nullptr : "model.spec replaces it";
  };
  return s;
}

// An enum field: its values spelled as enum_names<E>() says, shown as "a|b|c".
template <class Access>
OptionSpec choice(std::string name, Access acc, std::string help) {
  using E = FieldType<Access>;
  std::vector<std::string> choices;
  for (const EnumName<E>& n : enum_names<E>()) choices.emplace_back(n.name);
  std::string shown;
  for (const std::string& c : choices) shown += (shown.empty() ? "" : "|") + c;
  OptionSpec s = base(std::move(name), shown, std::move(help));
  s.choices = choices;
  s.get = [acc](const Config& c) -> std::string { return name_of(acc(c)); };
  s.set = [acc, choices](Config& c, const std::string& text) {
    const std::string chosen = parse_choice(text, choices);
    for (const EnumName<E>& n : enum_names<E>())
      if (chosen == n.name) acc(c) = n.value;
  };
  return s;
}

// auto | true | false (SyncBn), where true and false take every bool spelling.
template <class Access>
OptionSpec auto_or_bool(std::string name, Access acc, std::string help) {
  OptionSpec s = choice(std::move(name), acc, std::move(help));
  s.set = [acc, inner = s.set](Config& c, const std::string& text) {
    try {
      acc(c) = parse_bool(text) ? SyncBn::On : SyncBn::Off;
    } catch (const BadValue&) {
      inner(c, text);
    }
  };
  return s;
}

// Cheap existence check of an input file, so that a typo in a path fails in
// the first second instead of after MPI start-up.
void check_readable_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw BadValue("cannot open '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw BadValue("'" + path + "' is a directory, expected a file");
  if (access(path.c_str(), R_OK) != 0) throw BadValue("cannot read '" + path + "': " + std::strerror(errno));
}

// An output file's directory must exist: a missing one is a one-line error now, not after the work.
void check_output_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw BadValue("the directory '" + dir + "' of '" + path + "' does not exist");
}

enum class PathKind { ANY_TEXT, NON_EMPTY, INPUT_FILE, RESUME, OUTPUT_FILE };

template <class Access>
OptionSpec text(std::string name, Access acc, PathKind kind, std::string value_name, std::string help) {
  OptionSpec s = base(std::move(name), std::move(value_name), std::move(help));
  s.get = [acc](const Config& c) { return acc(c); };
  s.set = [acc, kind](Config& c, const std::string& value) {
    if (kind == PathKind::NON_EMPTY && trim(value).empty()) throw BadValue("must not be empty");
    // doctor reports an unreadable input as a finding (exit 1) instead of failing here.
    if (kind == PathKind::INPUT_FILE && !value.empty() && c.command != Command::Doctor)
      check_readable_file(value);
    if (kind == PathKind::RESUME && !value.empty() && value != "auto") check_readable_file(value);
    if (kind == PathKind::OUTPUT_FILE) {
      if (trim(value).empty()) throw BadValue("must not be empty");
      check_output_dir(value);
    }
    acc(c) = value;
  };
  return s;
}

template <class Access>
OptionSpec int_list(std::string name, Access acc, std::string help) {
  OptionSpec s = base(std::move(name), "INT,INT", std::move(help));
  s.get = [acc](const Config& c) { return format_int_list(acc(c)); };
  s.set = [acc](Config& c, const std::string& value) { acc(c) = parse_int_list(value); };
  return s;
}

// A config file that names another config file would be a second, hidden
// level of precedence: --config comes from the command line or environment only.
OptionSpec command_line_only(OptionSpec s) {
  s.in_file = false;
  return s;
}

// A switch of `hpctrain doctor` only: anywhere else it would be silently ignored.
OptionSpec doctor_only(OptionSpec s) {
  s.in_file = false;
  s.set = [inner = s.set](Config& c, const std::string& text) {
    if (c.command != Command::Doctor) throw BadValue("only for 'hpctrain doctor'");
    inner(c, text);
  };
  return s;
}

// An option of `hpctrain sample` only, like doctor_only.
OptionSpec sample_only(OptionSpec s) {
  s.in_file = false;
  s.set = [inner = s.set](Config& c, const std::string& text) {
    if (c.command != Command::Sample) throw BadValue("only for 'hpctrain sample'");
    inner(c, text);
  };
  return s;
}

// data.augment: checked here, so that a typo fails before MPI starts.
OptionSpec augment_option(OptionSpec s) {
  s.set = [inner = s.set](Config& c, const std::string& text) {
    try {
      data::parse_augment(text);
    } catch (const UserError& e) {
      throw BadValue(e.what());
    }
    inner(c, text);
  };
  return s;
}

// An option of `hpctrain export` only, like doctor_only.
OptionSpec export_only(OptionSpec s) {
  s.in_file = false;
  s.set = [inner = s.set, name = s.name](Config& c, const std::string& text) {
    if (c.command != Command::Export) throw BadValue("only for 'hpctrain export'");
    if (name == "dtype" && text != "auto" && text != "fp32" && text != "bf16" && text != "fp16")
      throw BadValue("auto, fp32, bf16 or fp16");
    inner(c, text);
  };
  return s;
}

// An option of `hpctrain eval` and `predict` only, like doctor_only.
OptionSpec eval_only(OptionSpec s) {
  s.in_file = false;
  s.set = [inner = s.set](Config& c, const std::string& text) {
    if (c.command != Command::Eval && c.command != Command::Predict && c.command != Command::Export)
      throw BadValue("only for 'hpctrain eval', 'predict' and 'export'");
    inner(c, text);
  };
  return s;
}

// The accessor for a field: generic so that the same lambda serves const
// (get) and mutable (set) access.
// clang-format off
#define FIELD(member) [](auto& c) -> auto& { return c.member; }  // NOLINT(bugprone-macro-parentheses): c.(member) is not C++
// clang-format on

std::vector<OptionSpec> build_table() {
  using P = PathKind;
  std::vector<OptionSpec> t = {
      command_line_only(text("config", FIELD(config_file), P::NON_EMPTY, "FILE",
                             "INI file: [group] sections of name = value (env HPCTRAIN_CONFIG)")),
      text("resume", FIELD(resume), P::RESUME, "auto|PATH",
           "continue from the newest valid checkpoint in run.dir (auto) or from this file"),
      text("checkpoint", FIELD(checkpoint), P::INPUT_FILE, "PATH",
           "checkpoint to evaluate, predict, sample or export from (or --model.init DIR|FILE)"),
      doctor_only(flag("json", FIELD(json), "doctor: print the report as JSON (--json alone means true)")),
      doctor_only(
          flag("local", FIELD(local),
               "doctor: check this process only, without MPI or the fabric preflight (container %test)")),
      doctor_only(text("flight", FIELD(flight_dir), P::NON_EMPTY, "RUN_DIR",
                       "doctor: read RUN_DIR/flight-*.json (collective flight records) and name the "
                       "diverging collective and the ranks behind it")),
      doctor_only(
          number("memory", FIELD(memory_ranks), AT_LEAST_ONE,
                 "doctor: print the configuration's per-rank memory model on this many ranks at "
                 "dist.zero 0-3 (parameters, gradients, optimizer state, gather buffers, activations) "
                 "and exit; no MPI, no training")),
      sample_only(text("prompt", FIELD(sample.prompt), P::ANY_TEXT, "TEXT",
                       "sample: the text to continue (its bytes are the first tokens)")),
      sample_only(number("tokens", FIELD(sample.tokens), AT_LEAST_ONE, "sample: tokens to generate")),
      sample_only(number("temperature", FIELD(sample.temperature), NON_NEGATIVE,
                         "sample: softmax temperature; 0 = greedy (always the most likely token)")),
      sample_only(number("top-k", FIELD(sample.top_k), NON_NEGATIVE,
                         "sample: draw among the k most likely tokens; 0 = all")),
      sample_only(
          number("seed", FIELD(sample.seed), ANY, "sample: random seed (the same seed, the same text)")),
      sample_only(flag("stop", FIELD(sample.stop),
                       "sample: stop at the end-of-text token, when the model's tokenizer has one")),
      sample_only(
          flag("kv-cache", FIELD(sample.kv_cache),
               "sample: keep each layer's keys and values (one forward over the prompt, then one token "
               "at a time); false: a full forward of the window per token")),
      export_only(text("dtype", FIELD(exporting.dtype), P::ANY_TEXT, "auto|fp32|bf16|fp16",
                       "export: the weights' dtype (auto: the training dtype, or the source's)")),
      export_only(number("max-shard-mb", FIELD(exporting.max_shard_mb), POSITIVE,
                         "export --format hf: weights above this size go into shards with "
                         "model.safetensors.index.json")),
      eval_only(
          choice("eval.split", FIELD(eval.split),
                 "eval/predict: the split to evaluate (auto: /val when the data has one, else /train)")),
      eval_only(text("out", FIELD(eval.out), P::OUTPUT_FILE, "PATH",
                     "eval: the eval.json to write (default: beside the checkpoint); predict: preds.h5; "
                     "export: the directory (-o DIR)")),
      eval_only(choice("format", FIELD(eval.format),
                       "export: torch (safetensors + model.py) | hf (Hugging Face GPT-2 or Llama layout: "
                       "config.json + safetensors) | onnx (model.onnx, opset 17, the inference graph)")),
      export_only(flag("force", FIELD(eval.force),
                       "export: write into a -o directory that already holds files (those of the same names "
                       "are replaced, the others stay); --force alone means true")),

      text("data.path", FIELD(data.path), P::INPUT_FILE, "PATH",
           "HDF5 dataset with /train and optionally /val (needed by train and eval)"),
      text("data.val_path", FIELD(data.val_path), P::INPUT_FILE, "PATH", "separate HDF5 validation file"),
      number("data.workers", FIELD(data.workers), AT_LEAST_ONE, "loader threads per rank"),
      number("data.prefetch", FIELD(data.prefetch), AT_LEAST_ONE, "batches in flight per rank"),
      flag("data.drop_last", FIELD(data.drop_last), "drop the last partial global batch of an epoch"),
      choice("data.check", FIELD(data.check), "how much of the inputs to scan for non-finite values"),
      augment_option(text("data.augment", FIELD(data.augment), P::ANY_TEXT, "LIST",
                          "training images: flip (horizontal, p = 1/2), crop:P (pad P, random crop); e.g. "
                          "\"flip, crop:4\"; none by default")),

      unused_when_spec(
          name_choice("model.preset", FIELD(model.preset), nn::preset_names(), preset_help(), "NAME")),
      text("model.spec", FIELD(model.spec), P::ANY_TEXT, "SPEC",
           "explicit layer spec, e.g. \"conv(32,3,pad=1) relu flatten linear(10)\"; overrides the preset"),
      int_list("model.hidden", FIELD(model.hidden), "mlp hidden layer widths"),
      text(
          "model.init", FIELD(model.init), P::ANY_TEXT, "PATH",
          "start from these parameters: an hpctrain checkpoint, a safetensors file or a Hugging Face GPT-2 / "
          "Llama directory (not the optimizer, step or sampler); eval, predict, sample, export: the model"),
      text("model.init_skip", FIELD(model.init_skip), P::ANY_TEXT, "NAME,NAME",
           "tensors (or prefixes such as 11.linear) that model.init leaves freshly initialised"),
      auto_or_bool("model.sync_bn", FIELD(model.sync_bn),
                   "batch-norm statistics over all ranks (auto: when there is more than one)"),
      number("model.layers", FIELD(model.layers), NON_NEGATIVE,
             "gpt/llama: transformer blocks (0: the preset's)"),
      number("model.heads", FIELD(model.heads), NON_NEGATIVE, "gpt/llama: attention heads (0: the preset's)"),
      number("model.kv_heads", FIELD(model.kv_heads), NON_NEGATIVE,
             "gpt/llama: key/value heads, heads a multiple of them; 1 = multi-query (0: the preset's)"),
      number("model.width", FIELD(model.width), NON_NEGATIVE,
             "gpt/llama: embedding width; resnet50: the first stage's width, 64 (0: the preset's)"),
      number("model.ffn", FIELD(model.ffn), NON_NEGATIVE,
             "gpt/llama: MLP width (0: the preset's; GPT 4 × width)"),
      number("model.context", FIELD(model.context), NON_NEGATIVE,
             "gpt/llama: tokens per training window (0: the preset's)"),
      number("model.vocab", FIELD(model.vocab), NON_NEGATIVE, "gpt/llama: vocabulary size (0: the preset's)"),
      flag("model.recompute", FIELD(model.recompute),
           "gpt/llama: recompute block activations in backward to save memory"),
      flag("model.zero_init_residual", FIELD(model.zero_init_residual),
           "resnet20/resnet50: start each residual branch's last bn at gamma = 0 (the block starts as the "
           "identity)"),

      choice("optim.name", FIELD(optim.name), "optimizer"),
      number("optim.lr", FIELD(optim.lr), POSITIVE, "peak learning rate (after warmup, before lr_scaling)"),
      number("optim.momentum", FIELD(optim.momentum), NON_NEGATIVE, "sgd momentum"),
      flag("optim.nesterov", FIELD(optim.nesterov), "sgd: Nesterov momentum"),
      number("optim.beta1", FIELD(optim.beta1), UNIT_HALF_OPEN, "adam/adamw first-moment decay, in [0, 1)"),
      number("optim.beta2", FIELD(optim.beta2), UNIT_HALF_OPEN, "adam/adamw second-moment decay, in [0, 1)"),
      number("optim.eps", FIELD(optim.eps), POSITIVE, "adam/adamw denominator epsilon"),
      number("optim.weight_decay", FIELD(optim.weight_decay), NON_NEGATIVE,
             "L2 penalty (sgd, adam) or decoupled decay (adamw)"),
      number("optim.clip_norm", FIELD(optim.clip_norm), NON_NEGATIVE,
             "clip gradients to this global L2 norm; 0 = off"),
      choice("optim.schedule", FIELD(optim.schedule), "learning-rate schedule after warmup"),
      number("optim.warmup_steps", FIELD(optim.warmup_steps), NON_NEGATIVE,
             "linear warmup from 0, in optimizer steps"),
      number("optim.step_every", FIELD(optim.step_every), AT_LEAST_ONE,
             "step schedule: multiply lr by gamma every this many optimizer steps"),
      number("optim.gamma", FIELD(optim.gamma), POSITIVE, "step schedule: lr factor"),
      number("optim.min_lr", FIELD(optim.min_lr), NON_NEGATIVE, "cosine schedule: final learning rate"),
      choice("optim.lr_scaling", FIELD(optim.lr_scaling), "linear: lr × global batch / optim.base_batch"),
      number("optim.base_batch", FIELD(optim.base_batch), AT_LEAST_ONE,
             "global batch (samples) that optim.lr was tuned for"),

      number("train.batch_size", FIELD(train.batch_size), AT_LEAST_ONE,
             "samples per rank per micro-batch; global = batch_size × ranks × accum_steps"),
      number("train.epochs", FIELD(train.epochs), NON_NEGATIVE,
             "total epochs of the run (used when train.steps = 0)"),
      number("train.steps", FIELD(train.steps), NON_NEGATIVE,
             "total optimizer steps of the run; 0 = use epochs"),
      number("train.accum_steps", FIELD(train.accum_steps), AT_LEAST_ONE, "micro-batches per optimizer step"),
      number("train.micro_batches", FIELD(train.micro_batches), AT_LEAST_ONE,
             "cut each batch_size into this many micro-batches (a pipeline's; with dist.pp 1 gradient "
             "accumulation with the pipeline's arithmetic); multiplies with accum_steps"),
      number("train.seed", FIELD(train.seed), ANY, "random seed: initialisation, shuffling, dropout"),
      choice("train.device", FIELD(train.device), "auto: cuda when a GPU is visible"),
      choice("train.precision", FIELD(train.precision), "compute precision (bf16, fp16: GPU only)"),
      choice("train.loss", FIELD(train.loss), "auto: ce for class ids, mse for float targets"),
      number("train.label_smoothing", FIELD(train.label_smoothing), UNIT_HALF_OPEN,
             "cross-entropy label smoothing, in [0, 1)"),
      number("train.time_limit", FIELD(train.time_limit), NON_NEGATIVE,
             "seconds of wall time, then checkpoint and exit 75 for requeue; 0 = none"),

      choice("dist.backend", FIELD(dist.backend), "gradient allreduce (auto: nccl on GPUs, mpi otherwise)"),
      number("dist.bucket_mb", FIELD(dist.bucket_mb), POSITIVE, "gradient bucket size in MiB"),
      number("dist.timeout", FIELD(dist.timeout), POSITIVE,
             "seconds a collective may take before the job is aborted"),
      flag("dist.overlap", FIELD(dist.overlap),
           "start each gradient bucket's allreduce during backward (false: all after backward)"),
      choice("dist.reduce", FIELD(dist.reduce),
             "CPU reductions: ordered (rank order: bitwise the same for any bucketing) or native (the MPI "
             "library's MPI_Iallreduce / MPI_Ireduce_scatter: its tuned algorithms, bits may change)"),
      number("dist.zero", FIELD(dist.zero), ZERO_STAGES,
             "ZeRO stage: 0 replicated; 1 optimizer state sharded over the ranks; 2 also gradients "
             "reduce-scattered bucket by bucket during backward; 3 also parameters, gathered unit by unit"),
      number(
          "dist.zero_unit_mb", FIELD(dist.zero_unit_mb), NON_NEGATIVE,
          "dist.zero 3: most MiB of parameters gathered as one unit (consecutive layers bucketed up to it; "
          "a layer is never split); 0 = a unit per layer"),
      number(
          "dist.zero_keep_mb", FIELD(dist.zero_keep_mb), NON_NEGATIVE,
          "dist.zero 3: units of at most this many MiB stay gathered from their forward to their backward"),
      flag("dist.zero_prefetch", FIELD(dist.zero_prefetch),
           "dist.zero 3: gather the next unit while the current one computes (false: each when needed)"),
      number("dist.tp", FIELD(dist.tp), AT_LEAST_ONE,
             "tensor-parallel size: adjacent ranks that split each transformer layer (must divide the "
             "world; the rest is data parallel)"),
      number("dist.pp", FIELD(dist.pp), AT_LEAST_ONE,
             "pipeline-parallel size: stages of the model (world = dp × pp × tp)"),
      number("dist.pp_virtual", FIELD(dist.pp_virtual), AT_LEAST_ONE,
             "model chunks per pipeline stage: > 1 runs the interleaved 1F1B schedule"),
      text("dist.pp_split", FIELD(dist.pp_split), P::ANY_TEXT, "N,N,...",
           "transformer blocks of each pipeline stage, in order (empty = balanced by the layers' FLOPs)"),
      flag("dist.sequence_parallel", FIELD(dist.sequence_parallel),
           "with dist.tp > 1: norms, dropout and residual adds on 1/tp of the sequence (all-gather and "
           "reduce-scatter instead of all-reduces)"),

      number("log.every", FIELD(log.every), AT_LEAST_ONE, "steps between step-table lines"),
      choice("log.progress", FIELD(log.progress), "auto: a bar on a TTY, plain lines otherwise"),
      text("log.trace", FIELD(log.trace), P::ANY_TEXT, "FILE",
           "write a Chrome-trace JSON timeline of every rank (Perfetto, chrome://tracing) to FILE; empty = "
           "off"),
      text("log.trace_steps", FIELD(log.trace_steps), P::NON_EMPTY, "A:B",
           "the steps (1-based, inclusive) log.trace records"),

      number("ckpt.every_steps", FIELD(ckpt.every_steps), NON_NEGATIVE,
             "checkpoint every this many optimizer steps; 0 = off"),
      number("ckpt.every_minutes", FIELD(ckpt.every_minutes), NON_NEGATIVE,
             "checkpoint every this many minutes of wall time; 0 = off"),
      number("ckpt.keep", FIELD(ckpt.keep), AT_LEAST_ONE, "checkpoints kept in run.dir"),
      flag("ckpt.allow_reshard", FIELD(ckpt.allow_reshard),
           "allow resuming with another global batch (position carried over in samples; not bit-exact); "
           "another number of ranks with the same global batch needs no flag"),
      flag("ckpt.async", FIELD(ckpt.async),
           "write checkpoints in a background thread from a host snapshot taken at the step boundary "
           "(at most one in flight); false: training waits for each write"),

      text("run.dir", FIELD(run_dir), P::NON_EMPTY, "DIR",
           "run directory: config.ini, metrics.jsonl, checkpoints"),
  };
  return t;
}

#undef FIELD

// Optimal string alignment distance: Levenshtein plus adjacent swaps.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = build_table();
  return table;
}

const OptionSpec* find_option(std::string_view name) {
  for (const OptionSpec& s : option_table())
    if (s.name == name) return &s;
  return nullptr;
}

std::string env_name(const OptionSpec& spec) {
  std::string r = "HPCTRAIN_";
  for (char ch : spec.name)
    r += ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return r;
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // Up to 2 edits for short names, about one in four characters for long ones:
  // close enough to be a typo, far enough not to suggest unrelated options.
  size_t limit = std::max<size_t>(2, word.size() / 4);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  if (!best.empty()) return best;
  for (const std::string& c : candidates) {
    size_t dot = c.rfind('.');
    if (dot != std::string::npos && std::string_view(c).substr(dot + 1) == word) return c;
  }
  return "";
}

}  // namespace hpc::config
