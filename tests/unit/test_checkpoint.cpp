// Checkpoints: a bit-exact round trip of every field; the per-tensor
// /params/<name> datasets other tools read; every kind of damage found and
// named (flipped byte, truncation, foreign file, future version), also when
// the flat datasets are only verified and then read in pieces; the run
// directory bookkeeping (names, newest valid, pruning, stale timelines,
// leftovers of killed writers); resume compatibility; model/optimizer
// capture and restore.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "ckpt/h5_io.h"
#include "ckpt/model_state.h"
#include "ckpt/store.h"
#include "ckpt/validate.h"
#include "core/error.h"

namespace fs = std::filesystem;
using namespace hpc;
using namespace hpc::ckpt;

namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hpctrain-ckpt-test.XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

Tensor filled(Shape shape, float start) {
  Tensor t(std::move(shape), DType::F32);
  for (int64_t i = 0; i < t.count(); ++i)
    t.data<float>()[i] = start + 0.25f * static_cast<float>(i) - 1e-7f * i * i;
  return t;
}

Checkpoint sample(int64_t step = 40) {
  Checkpoint c;
  c.step = step, c.epoch = 2, c.step_in_epoch = 8, c.consumed_samples = step * 64, c.total_steps = 100;
  c.world_size = 2, c.batch_size = 32, c.accum_steps = 1, c.global_batch = 64, c.train_samples = 1024;
  c.spec = "flatten linear(3)";
  c.input_shape = Shape{1, 2, 2};
  c.params = filled(Shape{15}, -1.5f);
  c.param_entries = {{"1.linear.weight", 0, Shape{3, 4}}, {"1.linear.bias", 12, Shape{3}}};
  c.buffers = {{"0.bn.running_mean", filled(Shape{4}, 0.5f)}, {"0.bn.running_var", filled(Shape{4}, 1.0f)}};
  c.optimizer = "adam";
  c.optimizer_steps = step;
  c.optimizer_state = {{"exp_avg", filled(Shape{15}, 0.01f)}, {"exp_avg_sq", filled(Shape{15}, 0.02f)}};
  c.seed = 0xfedcba9876543210ull;  // above 2^63: the uint64 path
  c.sampler_epoch = 2, c.sampler_batch = 8, c.dropout_step = step;
  c.log_window = {{1.5, 64, 50, 3}, {1.25, 64, 51, 3}};
  c.config_ini = "[train]\nsteps = 100\n";
  c.hpctrain_version = "test";
  c.created_unix = 1700000000;
  return c;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.count() == b.count() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.num_bytes()) == 0;
}

// Byte offset of a contiguous dataset in the file.
haddr_t dataset_offset(const std::string& path, const std::string& name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return off;
}

void flip_byte(const std::string& path, off_t offset) {
  // A stream closes itself when an ASSERT returns early (a raw fd leaked there).
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.is_open()) << path;
  char b = 0;
  ASSERT_TRUE(f.seekg(offset).get(b)) << path << " @" << offset;
  ASSERT_TRUE(f.seekp(offset).put(static_cast<char>(b ^ 0x10)).flush()) << path << " @" << offset;
}

void set_int_attr(const std::string& path, const char* name, int64_t value) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
  H5Fclose(f);
}

// read_checkpoint must fail with a UserError whose message contains `part`.
void expect_read_error(const std::string& path, const std::string& part, FlatData flat = FlatData::Load) {
  try {
    read_checkpoint(path, flat);
    ADD_FAILURE() << "reading " << path << " should fail with '" << part << "'";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "names the file: " << msg;
  }
}

}  // namespace

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  const Checkpoint c = sample();
  const std::string path = dir / "ckpt-00000040.h5";
  write_checkpoint(path, c);
  const Checkpoint r = read_checkpoint(path);
  EXPECT_EQ(r.step, c.step);
  EXPECT_EQ(r.epoch, c.epoch);
  EXPECT_EQ(r.step_in_epoch, c.step_in_epoch);
  EXPECT_EQ(r.consumed_samples, c.consumed_samples);
  EXPECT_EQ(r.total_steps, c.total_steps);
  EXPECT_EQ(r.world_size, c.world_size);
  EXPECT_EQ(r.global_batch, c.global_batch);
  EXPECT_EQ(r.train_samples, c.train_samples);
  EXPECT_EQ(r.spec, c.spec);
  EXPECT_EQ(r.input_shape, c.input_shape);
  EXPECT_TRUE(same_bytes(r.params, c.params));
  ASSERT_EQ(r.buffers.size(), 2u);
  for (const NamedTensor& b : c.buffers) {
    bool found = false;
    for (const NamedTensor& rb : r.buffers) found |= rb.name == b.name && same_bytes(rb.value, b.value);
    EXPECT_TRUE(found) << b.name;
  }
  EXPECT_EQ(r.optimizer, "adam");
  EXPECT_EQ(r.optimizer_steps, c.optimizer_steps);
  ASSERT_EQ(r.optimizer_state.size(), 2u);
  EXPECT_EQ(r.seed, c.seed);
  EXPECT_EQ(r.dropout_step, c.dropout_step);
  ASSERT_EQ(r.log_window.size(), 2u);
  EXPECT_EQ(r.log_window[1].loss_sum, 1.25);
  EXPECT_EQ(r.log_window[1].correct, 51);
  EXPECT_EQ(r.config_ini, c.config_ini);
  EXPECT_EQ(content_checksum(r), content_checksum(c));
  for (const auto& e : fs::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename(), "ckpt-00000040.h5") << "no temporary file is left behind";
}

TEST(Checkpoint, NamedParameterTensorsHaveTheirShapes) {
  TempDir dir;
  const Checkpoint c = sample();
  const std::string path = dir / "c.h5";
  write_checkpoint(path, c);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/params/1.linear.weight", H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t s = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  ASSERT_EQ(H5Sget_simple_extent_ndims(s), 2);
  H5Sget_simple_extent_dims(s, dims, nullptr);
  EXPECT_EQ(dims[0], 3u);
  EXPECT_EQ(dims[1], 4u);
  float w[12];
  H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w);
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the point
  EXPECT_EQ(std::memcmp(w, c.params.data<float>(), sizeof w), 0) << "a view of the flat buffer at its offset";
  H5Sclose(s);
  H5Dclose(d);
  d = H5Dopen2(f, "/params/1.linear.bias", H5P_DEFAULT);
  float b[3];
  H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b);
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bitwise equality is the point
  EXPECT_EQ(std::memcmp(b, c.params.data<float>() + 12, sizeof b), 0);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(Checkpoint, DamageIsFoundAndNamed) {
  TempDir dir;
  const std::string good = dir / "good.h5";
  write_checkpoint(good, sample());
  for (const char* name :
       {"/params_flat", "/optimizer/exp_avg_sq", "/buffers/0.bn.running_var", "/log_window"}) {
    const std::string bad = dir / "bad.h5";
    fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
    flip_byte(bad, static_cast<off_t>(dataset_offset(bad, name) + 5));
    expect_read_error(bad, std::string(name).substr(1) + " is damaged");
    expect_read_error(bad, std::string(name).substr(1) + " is damaged", FlatData::Verify);
  }
  const std::string meta = dir / "meta.h5";
  fs::copy_file(good, meta);
  set_int_attr(meta, "step", 41);
  expect_read_error(meta, "metadata is damaged");
}

// A sharded resume verifies the flat datasets chunk by chunk without keeping them, then reads each
// rank's range: the same metadata and the same bytes as a whole read.
TEST(Checkpoint, VerifiedFlatDatasetsAreReadInPieces) {
  TempDir dir;
  const std::string path = dir / "c.h5";
  const Checkpoint c = sample();
  write_checkpoint(path, c, nullptr, 4);
  const Checkpoint whole = read_checkpoint(path);
  const Checkpoint verified = read_checkpoint(path, FlatData::Verify);
  EXPECT_FALSE(verified.params.defined());
  EXPECT_EQ(verified.num_params(), 15);
  ASSERT_EQ(verified.optimizer_state.size(), 2u);
  EXPECT_EQ(verified.optimizer_state[1].name, "exp_avg_sq");
  EXPECT_FALSE(verified.optimizer_state[1].value.defined());
  EXPECT_EQ(verified.step, whole.step);
  EXPECT_EQ(verified.log_window.size(), whole.log_window.size());
  EXPECT_TRUE(same_bytes(verified.buffers[1].value, whole.buffers[1].value));

  EXPECT_EQ(flat_dataset_of(verified, "exp_avg_sq"), 2u);
  {
    FlatFileSource file(path, 15, {"exp_avg", "exp_avg_sq"});
    for (const auto& [k, begin, n] :
         {std::tuple<size_t, int64_t, int64_t>{0, 0, 15}, {0, 3, 7}, {2, 10, 5}, {1, 14, 1}}) {
      Tensor part(Shape{n}, DType::F32);
      file.read(k, begin, part);
      const Tensor& all = k == 0 ? c.params : c.optimizer_state[k - 1].value;
      EXPECT_TRUE(same_bytes(part, all.slice(begin, Shape{n}))) << "dataset " << k << " at " << begin;
    }
  }
  // The chunked CRC is the whole dataset's, whatever the chunk.
  auto lock = data::h5_lock();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (int64_t chunk : {1, 4, 15, 64})
    EXPECT_EQ(h5::TensorReader(f, "params_flat", 15, "test").verify(chunk).crc,
              h5::crc32_bytes(c.params.raw(), c.params.num_bytes()))
        << "chunk " << chunk;
  EXPECT_THROW(h5::TensorReader(f, "params_flat", 16, "test"), UserError);
  H5Fclose(f);
}

TEST(Checkpoint, TruncatedForeignMissingAndFutureFilesAreRefused) {
  TempDir dir;
  const std::string good = dir / "good.h5";
  write_checkpoint(good, sample());
  const std::string cut = dir / "cut.h5";
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  expect_read_error(cut, "cannot open it");
  const std::string text = dir / "text.h5";
  std::ofstream(text) << "not hdf5\n";
  expect_read_error(text, "not an HDF5 file");
  expect_read_error(dir / "missing.h5", "no such file");
  expect_read_error(dir.str(), "is a directory");
  const std::string future = dir / "future.h5";
  fs::copy_file(good, future);
  set_int_attr(future, "format_version", FORMAT_VERSION + 1);
  expect_read_error(future, "newer hpctrain");
  // An HDF5 file that is not a checkpoint.
  const std::string other = dir / "other.h5";
  H5Fclose(H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  expect_read_error(other, "not an hpctrain checkpoint");
}

TEST(Checkpoint, FailedWriteLeavesNothing) {
  TempDir dir;
  EXPECT_THROW(write_checkpoint(dir / "no/such/dir/c.h5", sample()), UserError);
  EXPECT_TRUE(fs::is_empty(dir.str()));
}

TEST(CheckpointStore, NamesListAndNewestValid) {
  TempDir dir;
  EXPECT_EQ(checkpoint_path(dir.str(), 120), dir / "ckpt-00000120.h5");
  EXPECT_TRUE(list_checkpoints(dir / "absent").empty());
  for (int64_t s : {5, 30, 120}) write_checkpoint(checkpoint_path(dir.str(), s), sample(s));
  std::ofstream(dir / "ckpt-00000200.h5.tmp-123") << "partial";
  std::ofstream(dir / "ckpt-7.h5") << "garbage";  // unpadded names count too
  const auto all = list_checkpoints(dir.str());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].step, 120);
  EXPECT_EQ(all[3].step, 5);

  EXPECT_EQ(find_newest_valid(dir.str()).checkpoint->step, 120);
  fs::resize_file(checkpoint_path(dir.str(), 120), 100);
  Found f = find_newest_valid(dir.str());
  ASSERT_TRUE(f.checkpoint);
  EXPECT_EQ(f.checkpoint->step, 30);
  EXPECT_EQ(f.path, checkpoint_path(dir.str(), 30));
  ASSERT_EQ(f.skipped.size(), 1u);
  EXPECT_NE(f.skipped[0].find("ckpt-00000120.h5"), std::string::npos) << f.skipped[0];

  std::vector<std::string> log;
  auto r = locate_resume("auto", dir.str(), log);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->checkpoint.step, 30);
  EXPECT_EQ(log.size(), 1u);
  EXPECT_FALSE(r->flat) << "loaded whole: nothing left to stream";
  // Verified only: a flipped byte of a newer file's optimizer state is found without loading it.
  flip_byte(checkpoint_path(dir.str(), 30),
            static_cast<off_t>(dataset_offset(checkpoint_path(dir.str(), 30), "/optimizer/exp_avg") + 9));
  log.clear();
  auto v = locate_resume("auto", dir.str(), log, FlatData::Verify);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->checkpoint.step, 5);
  ASSERT_EQ(log.size(), 3u);  // 120 truncated, 30 damaged, 7 garbage
  EXPECT_NE(log[1].find("optimizer/exp_avg is damaged"), std::string::npos) << log[1];
  ASSERT_TRUE(v->flat);
  Tensor first(Shape{2}, DType::F32);
  v->flat->read(1, 0, first);
  EXPECT_TRUE(same_bytes(first, sample(5).optimizer_state[0].value.slice(0, Shape{2})));
  EXPECT_FALSE(locate_resume("", dir.str(), log));
  EXPECT_FALSE(locate_resume("auto", dir / "empty-run", log)) << "no checkpoint at all: a fresh start";
  EXPECT_THROW(locate_resume(dir / "ckpt-7.h5", dir.str(), log), UserError)
      << "an explicit PATH must be valid";
}

TEST(CheckpointStore, AllDamagedIsAnErrorNotAFreshStart) {
  TempDir dir;
  std::ofstream(dir / "ckpt-00000010.h5") << "garbage";
  std::vector<std::string> log;
  try {
    locate_resume("auto", dir.str(), log);
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("none is readable"), std::string::npos) << e.what();
  }
}

TEST(CheckpointStore, PruneKeepsNewestSetsAsideOtherTimelinesAndRemovesLeftovers) {
  TempDir dir;
  for (int64_t s : {10, 20, 30, 40, 50}) std::ofstream(checkpoint_path(dir.str(), s)) << "x";
  std::ofstream(dir / "ckpt-00000045.h5.tmp-99999") << "partial";
  // Resumed from 30 and wrote 35: 40 and 50 are another timeline.
  std::ofstream(checkpoint_path(dir.str(), 35)) << "x";
  auto log = prune(dir.str(), 35, 2);
  std::vector<int64_t> left;
  for (const auto& s : list_checkpoints(dir.str())) left.push_back(s.step);
  EXPECT_EQ(left, (std::vector<int64_t>{35, 30}));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir.str(), 50) + ".stale"));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir.str(), 40) + ".stale"));
  EXPECT_FALSE(fs::exists(dir / "ckpt-00000045.h5.tmp-99999"));
  EXPECT_EQ(log.size(), 3u) << "two set aside, one leftover removed";
}

TEST(CheckpointValidate, RefusesAnotherModelOptimizerOrGlobalBatch) {
  const Checkpoint c = sample();
  RunLayout run;
  run.spec = c.spec;
  run.input_shape = c.input_shape;
  run.num_params = 15;
  run.buffers = {{"0.bn.running_var", 4}, {"0.bn.running_mean", 4}};
  run.optimizer = "adam";
  run.optimizer_state = {"exp_avg", "exp_avg_sq"};
  run.world_size = 2, run.batch_size = 32, run.accum_steps = 1, run.global_batch = 64;
  run.train_samples = 1024, run.steps_per_epoch = 16, run.seed = c.seed;
  EXPECT_TRUE(check_resumable(c, "p", run).empty());

  auto refused = [&](const RunLayout& r, const std::string& part) {
    try {
      check_resumable(c, "p.h5", r);
      ADD_FAILURE() << "expected '" << part << "'";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  RunLayout r = run;
  r.spec = "flatten linear(4)";
  refused(r, "another model");
  r = run, r.num_params = 16;
  refused(r, "has 15 parameters, this model has 16");
  r = run, r.input_shape = Shape{1, 3, 3};
  refused(r, "inputs of 1x2x2");
  r = run, r.buffers.pop_back();
  refused(r, "buffers");
  r = run, r.optimizer = "sgd", r.optimizer_state = {"momentum"};
  refused(r, "optim.name adam");
  r = run, r.batch_size = 64, r.global_batch = 128;
  refused(r, "global batch of 64");

  r.allow_reshard = true;
  auto notes = check_resumable(c, "p", r);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("not bit-identical"), std::string::npos);
  // Epoch 2, 8 batches of 64 = 512 samples in → 4 batches of 128.
  EXPECT_EQ(resume_step(c, r), 2 * 16 + 4);
  r = run, r.world_size = 1, r.batch_size = 64;  // same global batch on fewer ranks: allowed
  notes = check_resumable(c, "p", r);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("on 1 rank(s)"), std::string::npos);
  EXPECT_EQ(resume_step(c, r), c.step);
}

TEST(CheckpointModelState, CaptureAndRestoreRoundTrip) {
  nn::Model model("conv(2,3,pad=1) bn relu flatten linear(3)", Shape{1, 4, 4}, DType::F32, 7);
  OptimConfig oc;
  oc.name = OptimizerKind::Adam;
  auto opt = optim::Optimizer::create(oc, model.params(), optim::decay_ranges_of(model.param_info()));
  // One step so that the optimizer state is not all zero.
  for (int64_t i = 0; i < model.num_params(); ++i)
    model.grads().data<float>()[i] = 0.01f * static_cast<float>(i % 7);
  opt->step(model.params(), model.grads(), 1e-2);
  for (auto& [name, t] : model.buffers()) t.data<float>()[0] = 3.0f;

  Checkpoint c;
  capture(model.params(), model, *opt, c);
  EXPECT_EQ(c.num_params(), model.num_params());
  EXPECT_EQ(c.param_entries.size(), model.param_info().size());
  EXPECT_EQ(c.optimizer_steps, 1);

  nn::Model other("conv(2,3,pad=1) bn relu flatten linear(3)", Shape{1, 4, 4}, DType::F32, 8);
  auto other_opt = optim::Optimizer::create(oc, other.params(), optim::decay_ranges_of(other.param_info()));
  RunLayout run = layout_of(other, *other_opt, "adam");
  run.global_batch = c.global_batch;
  c.optimizer = "adam";
  EXPECT_NO_THROW(check_resumable(c, "p", run));
  restore(c, other.params(), other, *other_opt);
  EXPECT_TRUE(same_bytes(other.params(), model.params()));
  EXPECT_EQ(other.buffers()[0].second.data<float>()[0], 3.0f);
  EXPECT_TRUE(same_bytes(other_opt->state()[0].second, opt->state()[0].second));
  EXPECT_EQ(other_opt->steps_taken(), 1);
}

// A synchronous save borrows the live float32 state (no copy, no memory); a background one copies it,
// so that training may change the live tensors while the snapshot is written.
TEST(CheckpointModelState, BorrowedSnapshotViewsTheLiveStateAndCopyDoesNot) {
  nn::Model model("linear(5) relu linear(3)", Shape{4}, DType::F32, 7);
  OptimConfig oc;
  oc.name = OptimizerKind::Adam;
  auto opt = optim::Optimizer::create(oc, model.params(), optim::decay_ranges_of(model.param_info()));
  const std::vector<std::pair<std::string, Tensor>> state = opt->state();
  Checkpoint borrowed, copied;
  capture(model.params(), model, *opt, borrowed, Snapshot::Borrow);
  capture(model.params(), model, *opt, copied, Snapshot::Copy);
  EXPECT_EQ(borrowed.params.data<float>(), model.params().data<float>());
  EXPECT_NE(copied.params.data<float>(), model.params().data<float>());
  EXPECT_TRUE(same_bytes(borrowed.params, copied.params));
  ASSERT_EQ(borrowed.optimizer_state.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(borrowed.optimizer_state[i].value.data<float>(), state[i].second.data<float>());
    EXPECT_NE(copied.optimizer_state[i].value.data<float>(), state[i].second.data<float>());
  }

  // A shard: rank 1 of 2 takes [bounds[1], bounds[2]) of the whole tensors, as a view or a copy.
  const int64_t n = model.num_params();
  const std::vector<int64_t> bounds = {0, n / 2, n};
  ShardSnapshot view, copy;
  capture_shard(model.params(), *opt, bounds, 1, view, Snapshot::Borrow);
  capture_shard(model.params(), *opt, bounds, 1, copy, Snapshot::Copy);
  ASSERT_EQ(view.params.count(), n - n / 2);
  EXPECT_EQ(view.params.data<float>(), model.params().data<float>() + n / 2);
  EXPECT_NE(copy.params.data<float>(), model.params().data<float>() + n / 2);
  EXPECT_TRUE(same_bytes(view.params, copy.params));
  EXPECT_EQ(view.state[0].value.data<float>(), state[0].second.data<float>() + n / 2);

  // Training goes on: the copy keeps the saved values, the borrowed view follows the live tensor.
  const float saved = copy.params.data<float>()[0];
  model.params().data<float>()[n / 2] = saved + 1.0f;
  EXPECT_EQ(copy.params.data<float>()[0], saved);
  EXPECT_EQ(view.params.data<float>()[0], saved + 1.0f);
}
