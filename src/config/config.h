// The resolved configuration of a run.
//
// Sources, highest precedence first: command line (--optim.lr 0.01),
// environment (HPCTRAIN_OPTIM_LR), INI file (--config run.ini, [optim] lr=…),
// defaults. Every value is validated once in parse_config(); the rest of the
// program trusts this struct. to_ini() writes it back so that a run can be
// repeated exactly (RUN_DIR/config.ini).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "nn/spec.h"

namespace hpc {

// ---- the values of the choice options -------------------------------------------
// Validated once at parse time: the rest of the program switches on enums,
// never compares option text.
enum class Command { Train, Eval, Doctor, Sample, Predict, Export };
enum class ExportFormat { Torch, Hf, Onnx };  // hpctrain export --format
enum class EvalSplit { Auto, Val, Train };    // auto: /val when the data has one, else /train
enum class DataCheck { Quick, Full };         // how much of the inputs to scan for non-finite values
enum class SyncBn { Auto, On, Off };          // auto: on when the world size is > 1
enum class OptimizerKind { Sgd, Adam, AdamW };
enum class ScheduleKind { Constant, Step, Cosine };
enum class LrScaling { None, Linear };        // linear: lr × global_batch / base_batch
enum class DeviceChoice { Auto, Cpu, Cuda };  // auto: cuda when every rank sees a GPU
enum class Precision { Fp32, Bf16, Fp16 };
enum class LossKind { Auto, CrossEntropy, Mse };  // auto: ce for class ids, mse for float targets
enum class CommBackend { Auto, Mpi, Nccl };       // auto: nccl on GPUs, mpi otherwise
enum class ProgressStyle { Auto, Bar, Plain, None };
enum class ReduceAlgo { Ordered, Native };  // dist.reduce: rank-ordered (bitwise stable) or the MPI library's

// The spelling of every value of E on the command line, in INI files, in
// --help and in messages, in --help order (config/enum_names.cpp).
template <class E>
struct EnumName {
  E value;
  const char* name;
};
template <class E>
std::span<const EnumName<E>> enum_names();

// "adamw" for OptimizerKind::AdamW.
template <class E>
const char* name_of(E value) {
  for (const EnumName<E>& n : enum_names<E>())
    if (n.value == value) return n.name;
  return "?";
}

// OptimizerKind::AdamW for "adamw"; UserError for a name E does not have.
template <class E>
E enum_named(std::string_view name) {
  for (const EnumName<E>& n : enum_names<E>())
    if (name == n.name) return n.value;
  throw UserError("unknown value '" + std::string(name) + "'");
}

struct DataConfig {
  std::string path;       // HDF5 file with /train and optionally /val
  std::string val_path;   // optional separate validation file
  int workers = 2;        // loader threads
  int prefetch = 4;       // batches in flight
  bool drop_last = true;  // drop the last partial global batch of an epoch
  DataCheck check = DataCheck::Quick;
  std::string augment;  // training batches of images: "flip, crop:4" (data/augment.h); "" = none
};

// The preset and its shape options are nn's own (nn::PresetOptions: preset,
// hidden, and the gpt presets' layers/heads/width/context/vocab/recompute);
// the rest says how the model is given and run.
struct ModelConfig : nn::PresetOptions {
  std::string spec;  // explicit layer spec; overrides preset
  std::string
      init;  // parameters to start from: checkpoint, safetensors or HF GPT-2 directory (train/model_init.h)
  std::string
      init_skip;  // tensors (or dotted prefixes) model.init leaves freshly initialised, comma-separated
  SyncBn sync_bn = SyncBn::Auto;
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::Adam;
  double lr = 1e-3;
  double momentum = 0.9;                          // sgd
  bool nesterov = false;                          // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
  double weight_decay = 0.0;                      // L2 (sgd, adam) or decoupled (adamw)
  double clip_norm = 0.0;                         // clip gradients to this global L2 norm; 0 = off
  ScheduleKind schedule = ScheduleKind::Cosine;   // to min_lr over the run: the cnn preset reaches 97.5% on
                                                  // the MNIST sample in 5 epochs
  int64_t warmup_steps = 0;   // linear warmup over this many optimizer steps (step s gets peak·(s+1)/warmup)
  int64_t step_every = 1000;  // step schedule: multiply lr by gamma every this many steps
  double gamma = 0.1;
  double min_lr = 0.0;  // cosine floor
  LrScaling lr_scaling = LrScaling::None;
  int64_t base_batch = 256;
};

struct TrainConfig {
  int64_t batch_size = 64;    // per rank
  int64_t epochs = 5;         // total epochs (ignored when steps > 0)
  int64_t steps = 0;          // total optimizer steps; 0 = use epochs
  int64_t accum_steps = 1;    // micro-batches per optimizer step
  int64_t micro_batches = 1;  // batch_size cut into this many micro-batches (a pipeline's; × accum_steps)
  uint64_t seed = 42;
  DeviceChoice device = DeviceChoice::Auto;
  Precision precision = Precision::Fp32;  // bf16, fp16: GPU only
  LossKind loss = LossKind::Auto;
  double label_smoothing = 0.0;
  double time_limit = 0;  // seconds; 0 = none
};

struct DistConfig {
  CommBackend backend = CommBackend::Auto;
  double bucket_mb = 25;
  double timeout = 300;                     // seconds per collective before the job is aborted
  bool overlap = true;                      // start each gradient bucket's allreduce during backward
  ReduceAlgo reduce = ReduceAlgo::Ordered;  // MpiComm's allreduce / reduce-scatter
  int zero =
      0;  // ZeRO stage: 0 replicated, 1 sharded optimizer state, 2 + bucket reduce-scatter, 3 + parameters
  double zero_unit_mb = 0;         // stage 3: the most parameters gathered as one unit; 0 = a unit per layer
  double zero_keep_mb = 1;         // stage 3: units this small stay gathered from forward to backward
  bool zero_prefetch = true;       // stage 3: gather the next unit while the current one computes
  int tp = 1;                      // tensor-parallel size (dist/grid.h: world = dp × pp × tp)
  int pp = 1;                      // pipeline-parallel size
  int pp_virtual = 1;              // model chunks per pipeline stage (interleaved 1F1B when > 1)
  std::string pp_split;            // blocks per pipeline piece, "3,3,3,3"; empty = balanced by FLOPs
  bool sequence_parallel = false;  // with tp > 1: norms, dropout, residual adds on 1/tp of the sequence
};

struct LogConfig {
  int64_t every = 50;                            // steps between step-table lines
  ProgressStyle progress = ProgressStyle::Auto;  // auto: a bar on a TTY
  std::string trace;                             // Chrome-trace JSON of every rank's timeline; "" = off
  std::string trace_steps = "1:20";              // A:B, the traced steps (train/trace.h)
};

struct CkptConfig {
  int64_t every_steps = 0;
  double every_minutes = 0;
  int keep = 3;
  bool allow_reshard = false;
  bool async = true;  // write from a host snapshot in a background thread (ckpt/async_writer.h)
};

// hpctrain sample (a language model's checkpoint): command-line options of that command only.
struct SampleConfig {
  std::string prompt;        // text to continue (tokenised as the model's data was)
  int64_t tokens = 200;      // tokens to generate
  double temperature = 0.8;  // softmax temperature; 0 = greedy
  int64_t top_k = 40;        // sample among the k most likely tokens; 0 = all
  uint64_t seed = 0;         // the same seed gives the same text
  bool stop = true;          // stop at the end-of-text token (when the tokenizer has one)
  bool kv_cache =
      true;  // one forward over the prompt, then one token at a time (false: a full window per token)
};

// hpctrain export: command-line options of that command only.
struct ExportConfig {
  std::string dtype =
      "auto";  // auto (the training dtype) | fp32 | bf16 | fp16: the weights' dtype (hf, torch)
  double max_shard_mb = 5000;  // hf: weights above this many MB go into shards with an index
};

// hpctrain eval / predict: command-line options of those commands only.
struct EvalConfig {
  EvalSplit split = EvalSplit::Auto;
  std::string
      out;  // eval: the eval.json path (default: beside the checkpoint); predict: preds.h5; export: DIR
  ExportFormat format = ExportFormat::Torch;  // export
  bool force = false;                         // export: write into a directory that already holds files
};

struct Config {
  Command command = Command::Train;
  std::string config_file;
  std::string run_dir = "runs/default";
  std::string resume;        // "" | auto | PATH
  std::string checkpoint;    // eval / predict / sample / export (or model.init)
  SampleConfig sample;       // sample
  ExportConfig exporting;    // export
  EvalConfig eval;           // eval, predict
  bool json = false;         // doctor: print the report as JSON
  bool local = false;        // doctor: this process only (no MPI, no fabric preflight)
  std::string flight_dir;    // doctor --flight: analyse this run directory's flight records (no MPI)
  int64_t memory_ranks = 0;  // doctor --memory N: the memory model on N ranks (no MPI); 0 = not asked
  DataConfig data;
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  DistConfig dist;
  LogConfig log;
  CkptConfig ckpt;
};

// Parses argv (argv[1] may be a sub-command), the environment and the INI
// file. Throws UserError (exit 2) naming the option on any bad value.
// Returns false when --help or --version was handled (already printed).
bool parse_config(int argc, const char* const* argv, Config& out);

// The resolved configuration as an INI file that parse_config reads back to an equal Config.
std::string to_ini(const Config& cfg);

// Human-readable version block: hpctrain version and commit, and every library it was built with.
std::string version_report();
// hpctrain's version (the VERSION file) and the commit it was built from ("unknown" outside a git
// checkout). The Makefile defines them for config/version.cpp alone, so that a new commit recompiles
// one file; everything that prints or stores them asks these.
const char* hpctrain_version();
const char* hpctrain_commit();

}  // namespace hpc
