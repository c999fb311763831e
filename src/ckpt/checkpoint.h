// Checkpoints: everything a run needs to continue exactly where it stopped,
// as one HDF5 file RUN_DIR/ckpt-STEP.h5 that other tools can read too.
//
// What makes resume exact is that every random choice in hpctrain is a pure
// function of coordinates the checkpoint already holds: the sampler order of
// (seed, epoch), dropout masks of (seed, micro-step, layer, rank), the
// initial weights of the seed. So the state is small: the flat parameters,
// the BatchNorm buffers, the optimizer state and its step counter, the step,
// and each rank's partial sums of the current logging window.
//
// File layout (format version 1; h5py: f.attrs["step"], f["params/0.conv.weight"][...]):
//   /                   attrs: magic, format_version, hpctrain_version, created_unix, checksum,
//                       step, epoch, step_in_epoch, consumed_samples, total_steps,
//                       world_size, batch_size, accum_steps, global_batch, train_samples,
//                       config (the resolved INI text)
//   /model              attrs: spec (canonical text), input_shape, num_params
//   /params_flat        float32 [num_params]: the model's flat parameter buffer
//   /params/<name>      float32 views of it with their shapes ("3.conv.weight"), for other tools
//   /buffers/<name>     float32: BatchNorm running statistics ("1.bn.running_mean")
//   /optimizer          attrs: name, steps_taken; datasets: flat state ("exp_avg", "exp_avg_sq", "momentum")
//   /rng                attrs: seed, sampler_epoch, sampler_batch, dropout_step (the counters the
//                       counter-based generators continue from)
//   /log_window         float64 [world_size, 4]: per data-parallel replica loss sum, sample count,
//                       correct, steps (world_size counts the replicas: the ranks when dist.tp =
//                       dist.pp = 1; a tensor-parallel group shares its replica's batch and sums)
//   /loss_scaling       float64 [4], fp16 runs only: loss scale, clean steps since its last change,
//                       skipped steps, consecutive skipped steps (train/mixed_precision.h); absent
//                       in fp32/bf16 runs and in files from before it was saved (a resume then
//                       starts the scale afresh), so its presence needs no new format version
// Every dataset the reader restores carries a `crc32` attribute; the root
// `checksum` is a CRC-32 over all metadata and payload bytes, so any damaged
// byte the reader depends on is found, and the damaged dataset is named.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hpc::ckpt {

constexpr const char* MAGIC = "hpctrain-checkpoint";
// Bumped when a reader of the old version could misread a new file. A reader
// refuses newer versions with one line instead of guessing.
constexpr int64_t FORMAT_VERSION = 1;

// A host float32 tensor with a name (a BatchNorm buffer, an optimizer state).
struct NamedTensor {
  std::string name;
  Tensor value;
};

// One parameter tensor's place in the flat buffer (written as /params/<name>).
struct ParamEntry {
  std::string name;
  int64_t offset = 0;
  Shape shape;
};

// Per-rank partial sums of the step-table window that was open at save time.
struct LogWindow {
  double loss_sum = 0, count = 0, correct = 0, steps = 0;
};

// fp16's dynamic loss scaling (GradScaler's state plus the trainer's skip counters).
struct LossScaling {
  double scale = 65536;
  int64_t good_steps = 0, skipped_steps = 0, consecutive_skips = 0;
};
// The /loss_scaling row (writer, reader and checksum share it); counters are ≤ 2^53, exact in a double.
inline std::array<double, 4> loss_scaling_row(const LossScaling& s) {
  return {s.scale, static_cast<double>(s.good_steps), static_cast<double>(s.skipped_steps),
          static_cast<double>(s.consecutive_skips)};
}

struct Checkpoint {
  // Where the run is. step = optimizer steps done; the sampler continues at
  // (epoch, step_in_epoch); consumed_samples = step × global_batch.
  int64_t step = 0, epoch = 0, step_in_epoch = 0, consumed_samples = 0, total_steps = 0;
  // How the run was laid out when saved.
  int64_t world_size = 1, batch_size = 0, accum_steps = 1, global_batch = 0, train_samples = 0;

  std::string spec;  // canonical model spec text
  Shape input_shape;
  Tensor params;                          // flat float32 [num_params]
  std::vector<ParamEntry> param_entries;  // written for other tools; not read back
  std::vector<NamedTensor> buffers;

  std::string optimizer;  // sgd | adam | adamw
  int64_t optimizer_steps = 0;
  std::vector<NamedTensor> optimizer_state;

  uint64_t seed = 0;
  int64_t sampler_epoch = 0, sampler_batch = 0, dropout_step = 0;

  std::vector<LogWindow> log_window;  // one per rank at save time

  std::optional<LossScaling> loss_scaling;  // fp16 runs (see /loss_scaling)

  std::string config_ini;
  std::string hpctrain_version;
  int64_t created_unix = 0;

  // Written from shards (ckpt/shard_stream.h): params and the optimizer_state tensors are left
  // undefined (the states keep their names) and the flat datasets, this long, come from a FlatSource.
  int64_t streamed_count = 0;

  int64_t num_params() const { return params.defined() ? params.count() : streamed_count; }
};

// Elements of a flat dataset the writer and the streamed reader handle at a time (16 MiB of float32).
constexpr int64_t CHUNK_ELEMS = int64_t{1} << 22;

// Where the writer takes the flat datasets from, chunk by chunk: dataset 0 is the parameters, dataset
// k > 0 the optimizer state Checkpoint::optimizer_state[k - 1]. The writer reads every dataset in
// order, each from its start to its end in consecutive chunks.
class FlatSource {
 public:
  virtual ~FlatSource() = default;
  // Elements [begin, begin + out.count()) of dataset k into out (host float32).
  virtual void read(size_t k, int64_t begin, const Tensor& out) = 0;
  // After a failed write: takes whatever is still coming, so that no other rank waits to send it.
  virtual void drain() {}
};

// A flat dataset's CRC-32 and length, computed while it was written chunk by chunk.
struct PayloadCrc {
  uint32_t crc = 0;
  uint64_t bytes = 0;
};

// The integer attributes of "/", in file order: the writer, the reader and
// the checksum all walk this one list. C is Checkpoint or const Checkpoint.
template <class C>
auto root_integers(C& c) {
  using P = std::pair<const char*, decltype(&c.step)>;
  return std::array{P{"step", &c.step},
                    P{"epoch", &c.epoch},
                    P{"step_in_epoch", &c.step_in_epoch},
                    P{"consumed_samples", &c.consumed_samples},
                    P{"total_steps", &c.total_steps},
                    P{"world_size", &c.world_size},
                    P{"batch_size", &c.batch_size},
                    P{"accum_steps", &c.accum_steps},
                    P{"global_batch", &c.global_batch},
                    P{"train_samples", &c.train_samples}};
}

// Writes `c` to `path` so that `path` never exists half-written: the data
// goes to a temporary name in the same directory (PATH.tmp-PID), is fsynced,
// renamed over `path`, and the directory is fsynced. A process killed at any
// moment leaves either the old state or the complete new file (plus, at
// worst, a temporary file that the next write removes). A full disk or
// exceeded quota (ENOSPC, EDQUOT, from HDF5's writes, the close, fsync or
// rename) throws IoError "cannot write checkpoint PATH: no space left on
// device (ENOSPC)"; any other failure (permissions) a UserError naming the
// path. Either way the temporary file is removed first. HPCTRAIN_FAULT
// points ckpt_write / ckpt_close / ckpt_fsync / ckpt_rename fail it here
// (exit@ckpt_write kills the process with half of the file written).
//
// source: where the flat datasets come from (null: c.params and c.optimizer_state, whole); they are
// written chunk_elems at a time, so the writer holds one chunk of them beyond what `c` holds.
void write_checkpoint(const std::string& path, const Checkpoint& c, FlatSource* source = nullptr,
                      int64_t chunk_elems = CHUNK_ELEMS);

// What read_checkpoint does with the flat datasets (the parameters and the
// optimizer state, the bulk of the file): Load them into params and
// optimizer_state, or only Verify them, CHUNK_ELEMS at a time (the tensors
// stay undefined, streamed_count holds their length): a sharded resume then
// sends each rank its range through a FlatFileSource, and no rank, the
// reader included, holds them whole.
enum class FlatData { Load, Verify };

// Reads and verifies a checkpoint: HDF5 signature, magic, format version (a
// newer one is refused), every restored dataset's CRC-32 and the checksum of
// the metadata. Throws UserError "checkpoint 'PATH': …" (one line) when the
// file is missing, unreadable, truncated, damaged or from a future version.
Checkpoint read_checkpoint(const std::string& path, FlatData flat = FlatData::Load);

// A checkpoint file's flat datasets read in pieces (after read_checkpoint verified them): dataset 0
// the parameters, k > 0 the optimizer state states[k - 1]. The file stays open until destruction, so a
// checkpoint pruned or replaced meanwhile is still the one verified. UserError on a file that changed.
class FlatFileSource final : public FlatSource {
 public:
  FlatFileSource(const std::string& path, int64_t num_params, const std::vector<std::string>& states);
  ~FlatFileSource() override;
  FlatFileSource(const FlatFileSource&) = delete;
  FlatFileSource& operator=(const FlatFileSource&) = delete;
  void read(size_t k, int64_t begin, const Tensor& out) override;

 private:
  struct Open;
  std::unique_ptr<Open> open_;
};

// CRC-32 (zlib) of everything the reader restores, in a fixed order: the
// metadata as text, then every payload tensor's bytes. flat: the CRCs of the
// parameters and of each optimizer state (c.optimizer_state's order) when
// they were streamed rather than held (combined with zlib's crc32_combine:
// the same value as over the bytes).
uint32_t content_checksum(const Checkpoint& c, const std::vector<PayloadCrc>* flat = nullptr);

}  // namespace hpc::ckpt
