// The checkpoint reader: checks in the order that gives the most useful
// message (is it a file, is it HDF5, is it ours, is it from a version we can
// read, is every restored byte intact), each failure one UserError line.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/h5_io.h"
#include "core/error.h"

namespace hpc::ckpt {

using data::h5_check;
using data::H5Handle;

namespace {

H5Handle open_checkpoint(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw UserError(what + ": no such file");
  if (std::filesystem::is_directory(status))
    throw UserError(what + ": is a directory, not a checkpoint file");
  if (::access(path.c_str(), R_OK) != 0)
    throw UserError(what + ": cannot read it (" + std::strerror(errno) + ")");
  if (H5Fis_hdf5(path.c_str()) == 0)
    throw UserError(what + ": not an HDF5 file (damaged or not a checkpoint)");
  H5Handle fapl = H5Handle::plist(h5_check(H5Pcreate(H5P_FILE_ACCESS), what));
  data::disable_file_locking(fapl.id(), what);
  // A truncated file fails here with HDF5's "truncated file: eof = …, stored_eof = …".
  return H5Handle::file(
      h5_check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.id()), what + ": cannot open it"));
}

// A step, epoch, batch or sample count: 0 ≤ value ≤ 2^53 (also exact as a double, which the
// resume broadcast uses). Anything else is a damaged or crafted file.
void check_counter(const char* name, int64_t value, const std::string& what) {
  if (value < 0 || value > (int64_t(1) << 53))
    throw UserError(what + ": implausible " + name + " " + std::to_string(value) + " (damaged file)");
}

std::vector<NamedTensor> read_named(hid_t f, const std::string& group, int64_t count,
                                    const std::string& what) {
  std::vector<NamedTensor> out;
  for (const std::string& name : h5::list_group(f, group, what))
    out.push_back({name, h5::read_tensor(f, group + "/" + name, DType::F32, count, what)});
  return out;
}

// A flat dataset's name in the file: 0 the parameters, k > 0 the optimizer state states[k - 1].
std::string flat_name(size_t k, const std::vector<std::string>& states) {
  return k == 0 ? "params_flat" : "optimizer/" + states[k - 1];
}

}  // namespace

struct FlatFileSource::Open {
  H5Handle file;
  std::vector<h5::TensorReader> datasets;
};

FlatFileSource::FlatFileSource(const std::string& path, int64_t num_params,
                               const std::vector<std::string>& states)
    : open_(std::make_unique<Open>()) {
  const std::string what = "checkpoint '" + path + "'";
  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  open_->file = open_checkpoint(path, what);
  for (size_t k = 0; k <= states.size(); ++k)
    open_->datasets.emplace_back(open_->file.id(), flat_name(k, states), num_params, what);
}

FlatFileSource::~FlatFileSource() {
  auto lock = data::h5_lock();  // the handles close under the lock
  open_.reset();
}

void FlatFileSource::read(size_t k, int64_t begin, const Tensor& out) {
  HPC_ASSERT(k < open_->datasets.size(), "checkpoint: no flat dataset " + std::to_string(k));
  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  open_->datasets[k].read(begin, out);
}

Checkpoint read_checkpoint(const std::string& path, FlatData flat) {
  const std::string what = "checkpoint '" + path + "'";
  auto lock = data::h5_lock();  // before every handle: released after they close
  data::H5QuietErrors quiet;
  H5Handle file = open_checkpoint(path, what);
  const hid_t f = file.id();

  if (!h5::has_attr(f, "magic") || h5::read_attr_str(f, "magic", what) != MAGIC)
    throw UserError(what + ": not an hpctrain checkpoint (no '" + std::string(MAGIC) + "' magic)");
  const int64_t version = h5::read_attr_i64(f, "format_version", what);
  if (version > FORMAT_VERSION)
    throw UserError(what + ": format version " + std::to_string(version) +
                    " was written by a newer hpctrain (" + h5::read_attr_str(f, "hpctrain_version", what) +
                    "); this one reads versions up to " + std::to_string(FORMAT_VERSION) +
                    ": upgrade hpctrain");
  if (version < 1) throw UserError(what + ": invalid format version " + std::to_string(version));

  Checkpoint c;
  c.hpctrain_version = h5::read_attr_str(f, "hpctrain_version", what);
  c.created_unix = h5::read_attr_i64(f, "created_unix", what);
  for (auto [k, v] : root_integers(c)) *v = h5::read_attr_i64(f, k, what);
  c.config_ini = h5::read_attr_str(f, "config", what);
  if (c.world_size < 1 || c.world_size > (1 << 24) || c.step < 0)
    throw UserError(what + ": implausible world_size " + std::to_string(c.world_size) + " or step " +
                    std::to_string(c.step) + " (damaged file)");
  // Counters are products and sums on resume (samples = step × batch): bounded, they cannot overflow.
  for (auto [k, v] : root_integers(c)) check_counter(k, *v, what);

  int64_t num_params = 0;
  {
    if (H5Lexists(f, "model", H5P_DEFAULT) <= 0) throw UserError(what + ": group /model is missing");
    H5Handle model = H5Handle::group(h5_check(H5Gopen2(f, "model", H5P_DEFAULT), what + ": /model"));
    c.spec = h5::read_attr_str(model.id(), "spec", what + ": /model");
    c.input_shape = Shape(h5::read_attr_i64s(model.id(), "input_shape", what + ": /model"));
    num_params = h5::read_attr_i64(model.id(), "num_params", what + ": /model");
    check_counter("num_params", num_params, what);  // < 0 would let tensors of any length through
  }
  // Verify: the flat datasets' CRCs, chunk by chunk, into flat_crcs (the tensors stay undefined).
  std::vector<PayloadCrc> flat_crcs;
  auto verify = [&](const std::string& name) {
    flat_crcs.push_back(h5::TensorReader(f, name, num_params, what).verify(CHUNK_ELEMS));
  };
  if (flat == FlatData::Load) {
    c.params = h5::read_tensor(f, "params_flat", DType::F32, num_params, what);
  } else {
    verify("params_flat");
    c.streamed_count = num_params;
  }
  c.buffers = read_named(f, "buffers", -1, what);
  {
    if (H5Lexists(f, "optimizer", H5P_DEFAULT) <= 0) throw UserError(what + ": group /optimizer is missing");
    H5Handle opt = H5Handle::group(h5_check(H5Gopen2(f, "optimizer", H5P_DEFAULT), what + ": /optimizer"));
    c.optimizer = h5::read_attr_str(opt.id(), "name", what + ": /optimizer");
    c.optimizer_steps = h5::read_attr_i64(opt.id(), "steps_taken", what + ": /optimizer");
    check_counter("optimizer steps_taken", c.optimizer_steps, what);
  }
  if (flat == FlatData::Load) {
    c.optimizer_state = read_named(f, "optimizer", num_params, what);
  } else {
    for (const std::string& name : h5::list_group(f, "optimizer", what)) {
      verify("optimizer/" + name);
      c.optimizer_state.push_back({name, Tensor()});
    }
  }
  {
    if (H5Lexists(f, "rng", H5P_DEFAULT) <= 0) throw UserError(what + ": group /rng is missing");
    H5Handle rng = H5Handle::group(h5_check(H5Gopen2(f, "rng", H5P_DEFAULT), what + ": /rng"));
    c.seed = h5::read_attr_u64(rng.id(), "seed", what + ": /rng");
    c.sampler_epoch = h5::read_attr_i64(rng.id(), "sampler_epoch", what + ": /rng");
    c.sampler_batch = h5::read_attr_i64(rng.id(), "sampler_batch", what + ": /rng");
    c.dropout_step = h5::read_attr_i64(rng.id(), "dropout_step", what + ": /rng");
    check_counter("sampler_epoch", c.sampler_epoch, what);
    check_counter("sampler_batch", c.sampler_batch, what);
    check_counter("dropout_step", c.dropout_step, what);
  }
  Tensor window = h5::read_tensor(f, "log_window", DType::F64, 4 * c.world_size, what);
  for (int64_t r = 0; r < c.world_size; ++r) {
    const double* row = window.data<double>() + 4 * r;
    // The trainer adds these to its step-table window and converts the step count to an integer.
    if (!std::isfinite(row[0]) || !(row[1] >= 0 && row[2] >= 0 && row[3] >= 0) ||
        std::max({row[1], row[2], row[3]}) > 9007199254740992.0)
      throw UserError(what + ": implausible log_window of rank " + std::to_string(r) + " (damaged file)");
    c.log_window.push_back({row[0], row[1], row[2], row[3]});
  }

  if (H5Lexists(f, "loss_scaling", H5P_DEFAULT) > 0) {
    const Tensor t = h5::read_tensor(f, "loss_scaling", DType::F64, 4, what);
    const double* v = t.data<double>();
    // A power of two in float's range (GradScaler's rule keeps it one), and whole counters.
    int exponent = 0;
    const bool power_of_two = std::isfinite(v[0]) && v[0] > 0 && std::frexp(v[0], &exponent) == 0.5 &&
                              exponent >= -148 && exponent <= 128;
    for (int i = 1; i < 4; ++i)
      if (!(v[i] >= 0 && v[i] <= 9007199254740992.0 && v[i] == std::floor(v[i])))
        throw UserError(what + ": implausible loss_scaling counter " + std::to_string(v[i]) +
                        " (damaged file)");
    if (!power_of_two)
      throw UserError(what + ": implausible loss scale " + std::to_string(v[0]) + " (damaged file)");
    c.loss_scaling =
        LossScaling{v[0], static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2]), static_cast<int64_t>(v[3])};
  }

  const uint32_t stored = static_cast<uint32_t>(h5::read_attr_i64(f, "checksum", what));
  const uint32_t actual = content_checksum(c, flat == FlatData::Load ? nullptr : &flat_crcs);
  if (stored != actual) {
    char msg[128];
    std::snprintf(msg, sizeof msg, ": metadata is damaged (checksum %08x, stored %08x)", actual, stored);
    throw UserError(what + msg);
  }
  return c;
}

}  // namespace hpc::ckpt
