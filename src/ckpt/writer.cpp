// The checkpoint checksum and writer: temp file, fsync, rename, fsync of the
// directory (see checkpoint.h for the layout and the guarantees).
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/h5_io.h"
#include "core/error.h"
#include "core/fault.h"

namespace hpc::ckpt {

using data::h5_check;
using data::H5Handle;

namespace {

std::vector<const NamedTensor*> by_name(const std::vector<NamedTensor>& v) {
  std::vector<const NamedTensor*> out;
  out.reserve(v.size());
  for (const NamedTensor& t : v) out.push_back(&t);
  std::sort(out.begin(), out.end(),
            [](const NamedTensor* a, const NamedTensor* b) { return a->name < b->name; });
  return out;
}

// fsync of a file or directory: the rename is durable only once both are on disk.
bool sync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// Removes the temporary file unless the write completed (an exception on any path).
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!committed_) std::remove(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  bool committed_ = false;
};

// The errno of a write that failed inside HDF5: its sec2 driver reports
// "file write failed: …, errno = 28, error message = 'No space left on
// device', …" as the innermost message, which h5_check puts into ours. 0: none.
int errno_in(const std::string& message) {
  const size_t at = message.find("errno = ");
  return at == std::string::npos ? 0 : std::atoi(message.c_str() + at + 8);
}

bool disk_full(int err) { return err == ENOSPC || err == EDQUOT; }

// A full disk or quota is its own error (exit 74): the job must stop and say
// so, not retry; anything else keeps the old one-line UserError.
[[noreturn]] void throw_write_error(const std::string& path, int err, const std::string& otherwise) {
  if (err == ENOSPC) throw IoError("cannot write checkpoint " + path + ": no space left on device (ENOSPC)");
  if (err == EDQUOT) throw IoError("cannot write checkpoint " + path + ": disk quota exceeded (EDQUOT)");
  throw UserError(otherwise + " (" + std::strerror(err) + ")");
}

// The flat datasets of a checkpoint that holds them whole.
class HeldSource final : public FlatSource {
 public:
  explicit HeldSource(const Checkpoint& c) : c_(c) {}
  void read(size_t k, int64_t begin, const Tensor& out) override {
    const Tensor& from = k == 0 ? c_.params : c_.optimizer_state[k - 1].value;
    HPC_ASSERT(from.defined() && from.dtype() == DType::F32 && from.count() == c_.num_params(),
               "checkpoint: a flat dataset is not whole");
    std::memcpy(out.raw(), from.data<float>() + begin, out.num_bytes());
  }

 private:
  const Checkpoint& c_;
};

void write_named(hid_t file, const std::string& group, const std::vector<NamedTensor>& v,
                 const std::string& what) {
  for (const NamedTensor& t : v) h5::write_tensor(file, group + "/" + t.name, t.value, t.value.shape(), what);
}

}  // namespace

uint32_t content_checksum(const Checkpoint& c, const std::vector<PayloadCrc>* flat) {
  std::string m;
  auto add = [&m](const char* key, const std::string& value) { m += std::string(key) + "=" + value + "\n"; };
  add("format_version", std::to_string(FORMAT_VERSION));
  add("hpctrain_version", c.hpctrain_version);
  add("created_unix", std::to_string(c.created_unix));
  for (auto [k, v] : root_integers(c)) add(k, std::to_string(*v));
  for (auto [k, v] : {std::pair{"num_params", c.num_params()},
                      {"optimizer_steps", c.optimizer_steps},
                      {"sampler_epoch", c.sampler_epoch},
                      {"sampler_batch", c.sampler_batch},
                      {"dropout_step", c.dropout_step}})
    add(k, std::to_string(v));
  add("seed", std::to_string(c.seed));
  add("spec", c.spec);
  add("input_shape", c.input_shape.str());
  add("optimizer", c.optimizer);
  add("config", c.config_ini);
  for (const NamedTensor* t : by_name(c.buffers)) add("buffer", t->name);
  for (const NamedTensor* t : by_name(c.optimizer_state)) add("optimizer_state", t->name);
  uint32_t crc = h5::crc32_bytes(m.data(), m.size());
  // A flat dataset's bytes: held here, or streamed (its CRC combined in).
  auto payload = [&](const Tensor& t, size_t k) {
    if (flat != nullptr) {
      const PayloadCrc& p = (*flat)[k];
      return static_cast<uint32_t>(crc32_combine(crc, p.crc, static_cast<z_off_t>(p.bytes)));
    }
    return t.defined() ? h5::crc32_bytes(t.raw(), t.num_bytes(), crc) : crc;
  };
  HPC_ASSERT(flat == nullptr || flat->size() == 1 + c.optimizer_state.size(),
             "checksum: one CRC per flat dataset");
  crc = payload(c.params, 0);
  for (const NamedTensor* t : by_name(c.buffers))
    crc = h5::crc32_bytes(t->value.raw(), t->value.num_bytes(), crc);
  for (const NamedTensor* t : by_name(c.optimizer_state))
    crc = payload(t->value, 1 + static_cast<size_t>(t - c.optimizer_state.data()));
  for (const LogWindow& w : c.log_window) crc = h5::crc32_bytes(&w, sizeof w, crc);
  // Only when present: a file without it keeps the checksum it was written with.
  if (c.loss_scaling) {
    const std::array<double, 4> v = loss_scaling_row(*c.loss_scaling);
    crc = h5::crc32_bytes(v.data(), sizeof v, crc);
  }
  return crc;
}

void write_checkpoint(const std::string& path, const Checkpoint& c, FlatSource* source, int64_t chunk_elems) {
  namespace fs = std::filesystem;
  HPC_ASSERT(source != nullptr || (c.params.defined() && c.params.dtype() == DType::F32),
             "checkpoint parameters must be float32");
  HeldSource held(c);
  FlatSource* const from = source != nullptr ? source : &held;
  FlatSource& flat = *from;
  // Whatever stops the write part way, the flat datasets' senders get rid of what they still send.
  struct DrainOnFailure {
    FlatSource& flat;
    int uncaught = std::uncaught_exceptions();
    ~DrainOnFailure() {
      if (std::uncaught_exceptions() <= uncaught) return;
      try {
        flat.drain();
      } catch (const std::exception& e) {  // a lost peer as well: the write's own error is reported
        std::fprintf(stderr, "hpctrain: warning: %s\n", e.what());
      }
    }
  } drain{flat};
  TempFile tmp(path + ".tmp-" + std::to_string(::getpid()));
  const std::string what = "cannot write checkpoint " + tmp.path();
  // Declared before every handle, so it is released after they close: loader
  // threads may be inside HDF5 while rank 0 saves (see data::h5_lock).
  auto lock = data::h5_lock();
  data::H5QuietErrors quiet;
  H5Handle file;  // outside the try: after a failed write the catch closes it without a second message
  try {
    H5Handle fapl = H5Handle::plist(h5_check(H5Pcreate(H5P_FILE_ACCESS), what));
    // Lustre/GPFS/NFS often refuse locks, and nobody reads a temp file.
    data::disable_file_locking(fapl.id(), what);
    file =
        H5Handle::file(h5_check(H5Fcreate(tmp.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()), what));
    const hid_t f = file.id();

    h5::write_attr(f, "magic", std::string(MAGIC), what);
    h5::write_attr(f, "format_version", FORMAT_VERSION, what);
    h5::write_attr(f, "hpctrain_version", c.hpctrain_version, what);
    h5::write_attr(f, "created_unix", c.created_unix, what);
    for (auto [k, v] : root_integers(c)) h5::write_attr(f, k, *v, what);
    h5::write_attr(f, "config", c.config_ini, what);

    {
      H5Handle model = h5::create_group(f, "model", what);
      h5::write_attr(model.id(), "spec", c.spec, what);
      h5::write_attr(model.id(), "input_shape", c.input_shape.dims(), what);
      h5::write_attr(model.id(), "num_params", c.num_params(), what);
    }
    // The flat datasets chunk by chunk (one chunk of scratch), the parameters also per tensor.
    const int64_t n = c.num_params();
    const Tensor chunk(Shape{std::max<int64_t>(1, std::min(chunk_elems, n))}, DType::F32);
    std::vector<PayloadCrc> crcs;
    std::vector<h5::TensorWriter> tensors;
    for (const ParamEntry& p : c.param_entries) tensors.emplace_back(f, "params/" + p.name, p.shape, what);
    auto stream = [&](size_t k, const std::string& name, bool per_tensor) {
      h5::TensorWriter all(f, name, Shape{n}, what);
      size_t next = 0;  // the first tensor not yet complete
      for (int64_t begin = 0; begin < n; begin += chunk_elems) {
        const Shape piece{std::min(chunk_elems, n - begin)};
        const Tensor part = chunk.slice(0, piece);
        flat.read(k, begin, part);
        all.write(part);
        for (size_t i = next; per_tensor && i < tensors.size(); ++i) {  // entries in offset order
          const ParamEntry& p = c.param_entries[i];
          const int64_t a = std::max(begin, p.offset + tensors[i].written()),
                        b = std::min(begin + part.count(), p.offset + p.shape.count());
          if (b > a) tensors[i].write(part.slice(a - begin, Shape{b - a}));
          if (tensors[i].written() == p.shape.count() && i == next) ++next;
          if (p.offset >= begin + part.count()) break;
        }
      }
      all.finish();
      crcs.push_back(all.crc());
    };
    stream(0, "params_flat", true);
    for (h5::TensorWriter& t : tensors) t.finish();
    write_named(f, "buffers", c.buffers, what);
    if (const int err = fault_at(FaultPoint::CkptWrite)) throw_write_error(path, err, what);

    {
      H5Handle opt = h5::create_group(f, "optimizer", what);
      h5::write_attr(opt.id(), "name", c.optimizer, what);
      h5::write_attr(opt.id(), "steps_taken", c.optimizer_steps, what);
    }
    for (size_t k = 0; k < c.optimizer_state.size(); ++k)
      stream(1 + k, "optimizer/" + c.optimizer_state[k].name, false);
    {
      H5Handle rng = h5::create_group(f, "rng", what);
      h5::write_attr_u64(rng.id(), "seed", c.seed, what);
      h5::write_attr(rng.id(), "sampler_epoch", c.sampler_epoch, what);
      h5::write_attr(rng.id(), "sampler_batch", c.sampler_batch, what);
      h5::write_attr(rng.id(), "dropout_step", c.dropout_step, what);
    }
    Tensor window(Shape{static_cast<int64_t>(c.log_window.size()), 4}, DType::F64);
    for (size_t r = 0; r < c.log_window.size(); ++r) {
      const LogWindow& w = c.log_window[r];
      double* row = window.data<double>() + 4 * r;
      row[0] = w.loss_sum, row[1] = w.count, row[2] = w.correct, row[3] = w.steps;
    }
    h5::write_tensor(f, "log_window", window, window.shape(), what);
    if (c.loss_scaling) {
      std::array<double, 4> row = loss_scaling_row(*c.loss_scaling);
      h5::write_tensor(f, "loss_scaling", Tensor::borrow(row.data(), Shape{4}, DType::F64), Shape{4}, what);
    }
    h5::write_attr(f, "checksum", static_cast<int64_t>(content_checksum(c, &crcs)), what);
    if (const int err = fault_at(FaultPoint::CkptClose)) throw_write_error(path, err, what);
    if (file.close() < 0) data::throw_h5_error(what);
  } catch (const UserError& e) {
    // The file cannot be flushed either; its close fails the same way and would only say so again.
    file.close();
    // HDF5 says "errno = 28" somewhere inside its message: make that the clear disk-full line.
    if (disk_full(errno_in(e.what()))) throw_write_error(path, errno_in(e.what()), what);
    throw;
  }
  int err = fault_at(FaultPoint::CkptFsync);
  if (err == 0 && !sync_path(tmp.path(), O_RDONLY)) err = errno;
  if (err != 0) throw_write_error(path, err, "cannot sync checkpoint " + tmp.path() + " to disk");
  err = fault_at(FaultPoint::CkptRename);
  if (err == 0 && std::rename(tmp.path().c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) throw_write_error(path, err, "cannot rename " + tmp.path() + " to " + path);
  tmp.commit();
  const fs::path dir = fs::path(path).parent_path();
  if (!sync_path(dir.empty() ? "." : dir.string(), O_RDONLY | O_DIRECTORY))
    std::fprintf(stderr, "hpctrain: warning: cannot sync directory of %s (%s); the file is complete\n",
                 path.c_str(), std::strerror(errno));
}

}  // namespace hpc::ckpt
