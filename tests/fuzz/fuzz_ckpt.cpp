// Fuzz target: the checkpoint reader and resume checks (src/ckpt/reader.cpp,
// h5_io.cpp, validate.cpp, model_state.cpp), what `--resume` does with a
// file: "a crafted checkpoint must never write out of bounds".
//
// Structure-aware (libhdf5 itself never sees random bytes; see h5_builder.h):
// the input picks a small model and optimizer, captures a valid checkpoint
// of them, then rewrites its fields before writing it with the real writer
// (so checksums are valid and the reader gets past them to the values):
// any root integer (negative, huge, INT64_MIN), spec, input shape, a params
// tensor of the wrong length and values, BatchNorm buffers and optimizer
// state added, dropped, renamed or resized, the optimizer name, the log
// window (any length, NaN/Inf/huge sums). Then up to 3 raw edits with the
// HDF5 API: a group, dataset or attribute deleted, or an attribute
// replaced by one of another type or shape (these break the checksum, so
// they test the structural checks that come before it).
// Checks: read_checkpoint, check_resumable (against the model it was made
// from, with fuzz-chosen ranks / batch / reshard), resume_step, restore()
// into the live model and optimizer, and the trainer's own use of the log
// window all end in success or a UserError; ASan watches every write.
#include <cmath>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/model_state.h"
#include "ckpt/validate.h"
#include "h5_builder.h"
#include "nn/model.h"
#include "optim/optimizer.h"

namespace {

constexpr const char* TARGET = "ckpt";

hpc::Tensor fuzz_tensor(hpc::fuzz::ByteReader& in, int64_t usual) {
  const int64_t n = in.flag() ? usual : in.below(2 * static_cast<uint32_t>(usual) + 2);
  hpc::Tensor t(hpc::Shape{n}, hpc::DType::F32);
  for (int64_t i = 0; i < n && in.left() > 0 && in.below(4) == 0; ++i)
    t.data<float>()[i] = static_cast<float>(in.interesting_double());
  return t;
}

void mutate_named(hpc::fuzz::ByteReader& in, std::vector<hpc::ckpt::NamedTensor>& v, int64_t usual) {
  switch (in.below(6)) {
    case 0:
      if (!v.empty()) v.erase(v.begin() + in.below(static_cast<uint32_t>(v.size())));
      break;
    case 1:
      v.push_back({in.flag() ? "exp_avg" : "extra", fuzz_tensor(in, usual)});
      break;
    case 2:
      if (!v.empty()) v[in.below(static_cast<uint32_t>(v.size()))].name = in.flag() ? "momentum" : "x";
      break;
    case 3:
      if (!v.empty()) v[in.below(static_cast<uint32_t>(v.size()))].value = fuzz_tensor(in, usual);
      break;
    default:
      break;
  }
}

void change_fields(hpc::fuzz::ByteReader& in, hpc::ckpt::Checkpoint& c) {
  using namespace hpc;
  for (auto [name, field] : ckpt::root_integers(c))
    if (in.below(4) == 1) *field = in.interesting_int();
  if (in.below(8) == 1) c.spec = in.str(40);
  if (in.below(8) == 1) {
    std::vector<int64_t> dims(in.below(4));
    for (int64_t& d : dims) d = in.flag() ? in.interesting_int() : in.below(5);
    c.input_shape = Shape(dims);
  }
  if (in.below(4) == 1) c.params = fuzz_tensor(in, c.num_params());
  if (in.below(4) == 1) mutate_named(in, c.buffers, 2);
  if (in.below(8) == 1) c.optimizer = in.flag() ? "sgd" : in.str(8);
  if (in.below(4) == 1) c.optimizer_steps = in.interesting_int();
  if (in.below(4) == 1) mutate_named(in, c.optimizer_state, c.num_params());
  if (in.below(4) == 1) {
    c.log_window.resize(in.below(5));
    for (ckpt::LogWindow& w : c.log_window)
      w = {in.interesting_double(), in.interesting_double(), in.interesting_double(),
           in.interesting_double()};
  }
  if (in.below(8) == 1) c.seed = in.u64();
}

// Raw edits after writing: delete an object or attribute, or retype an attribute.
void edit_file(hpc::fuzz::ByteReader& in, const std::string& path) {
  using hpc::data::H5Handle;
  H5Handle file = H5Handle::file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  if (!file.valid()) return;
  static const char* const OBJECTS[] = {"/",           "/model",   "/optimizer", "/rng", "/params_flat",
                                        "/log_window", "/buffers", "/params"};
  static const char* const ATTRS[] = {
      "magic", "format_version",   "checksum",     "step", "world_size",  "config",
      "spec",  "input_shape",      "num_params",   "name", "steps_taken", "seed",
      "crc32", "hpctrain_version", "sampler_epoch"};
  const int edits = in.below(4);
  for (int e = 0; e < edits; ++e) {
    const char* obj = OBJECTS[in.below(8)];
    const char* attr = ATTRS[in.below(15)];
    switch (in.below(3)) {
      case 0:
        if (obj[1]) H5Ldelete(file.id(), obj, H5P_DEFAULT);
        break;
      case 1:
        H5Adelete_by_name(file.id(), obj, attr, H5P_DEFAULT);
        break;
      default: {
        H5Adelete_by_name(file.id(), obj, attr, H5P_DEFAULT);
        H5Handle target(H5Oopen(file.id(), obj, H5P_DEFAULT), H5Oclose, "object");
        if (target.valid()) hpc::fuzz::maybe_attr(in, target.id(), attr);
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::ByteReader in(data, size);
  static const char* const SPECS[] = {"flatten linear(3)", "conv(2,3,pad=1) bn relu flatten linear(2)",
                                      "flatten linear(4) relu dropout(0.5) linear(2)"};
  static const OptimizerKind OPTIMIZERS[] = {OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::AdamW};
  const Shape input{1, 4, 4};
  nn::Model model(SPECS[in.below(3)], input, DType::F32, 7);
  OptimConfig oc;
  oc.name = OPTIMIZERS[in.below(3)];
  oc.momentum = in.flag() ? 0.9 : 0.0;
  std::unique_ptr<optim::Optimizer> opt =
      optim::Optimizer::create(oc, model.params(), optim::decay_ranges_of(model.param_info()));

  ckpt::Checkpoint c;
  ckpt::capture(model.params(), model, *opt, c);
  c.world_size = 1, c.batch_size = 8, c.global_batch = 8, c.accum_steps = 1, c.train_samples = 64;
  c.log_window.assign(1, ckpt::LogWindow{});
  change_fields(in, c);
  const std::string path = fuzz::scratch().path() + "/ckpt-00000001.h5";
  try {
    ckpt::write_checkpoint(path, c);
  } catch (const std::exception&) {
    return 0;  // the writer is not under test: a Checkpoint it refuses gives no file
  }
  {
    auto lock = data::h5_lock();
    data::H5QuietErrors quiet;
    edit_file(in, path);
  }

  ckpt::RunLayout run = ckpt::layout_of(model, *opt, name_of(oc.name));
  run.world_size = 1 + in.below(4);
  run.batch_size = 1 + in.below(16);
  run.accum_steps = 1 + in.below(2);
  run.global_batch = run.world_size * run.batch_size * run.accum_steps;
  run.train_samples = 64;
  run.steps_per_epoch = in.below(8);
  run.allow_reshard = in.flag();
  fuzz::expect_clean(TARGET, [&] {
    const ckpt::Checkpoint back = ckpt::read_checkpoint(path);
    (void)ckpt::check_resumable(back, path, run);
    // What Trainer::apply_resume_checkpoint does with an accepted checkpoint.
    const int64_t step = ckpt::resume_step(back, run);
    (void)step;
    ckpt::restore(back, model.params(), model, *opt);
    double steps = 0;
    for (const ckpt::LogWindow& w : back.log_window) steps = std::max(steps, w.steps);
    (void)static_cast<int64_t>(steps);
  });
  return 0;
}
