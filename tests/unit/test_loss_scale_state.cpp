// fp16 dynamic loss scaling across a checkpoint: DynamicLossScale follows
// GradScaler's rule (kernels/amp_math.h) and counts skipped steps; its state
// written to a checkpoint (/loss_scaling), read back and restored continues
// bit-exactly where it stopped — including the clean steps counted towards the
// next growth, which a resume that restored only the scale would get wrong;
// a file without the state (fp32/bf16 runs, older files) still loads and means
// "start afresh"; damage and impossible values are one-line errors. All of it
// is host state, so it is tested here without a GPU.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "kernels/amp_math.h"
#include "temp_dir.h"
#include "train/mixed_precision.h"

using namespace hpc;
using train::DynamicLossScale;

namespace {

// A minimal valid checkpoint (one rank, a 5-parameter model).
ckpt::Checkpoint sample() {
  ckpt::Checkpoint c;
  c.step = 7, c.total_steps = 10, c.world_size = 1, c.batch_size = 4, c.global_batch = 4,
  c.train_samples = 40;
  c.spec = "flatten linear(1)";
  c.input_shape = Shape{4};
  c.params = Tensor(Shape{5}, DType::F32);
  for (int i = 0; i < 5; ++i) c.params.data<float>()[i] = 0.5f * static_cast<float>(i);
  c.optimizer = "sgd";
  c.log_window = {{1.0, 4, 2, 1}};
  c.config_ini = "[train]\n";
  c.hpctrain_version = "test";
  return c;
}

// Overflow pattern of step i: a few early overflows, then long clean stretches (so the scale
// grows, which takes 2000 clean steps), then a burst.
bool overflow_at(int64_t i) { return i == 3 || i == 4 || i == 2600 || (i >= 4100 && i < 4103); }

void expect_same(const DynamicLossScale& a, const DynamicLossScale& b, int64_t step) {
  const DynamicLossScale::State x = a.state(), y = b.state();
  ASSERT_EQ(x.scale, y.scale) << "step " << step;
  ASSERT_EQ(x.good_steps, y.good_steps) << "step " << step;
  ASSERT_EQ(x.skipped_steps, y.skipped_steps) << "step " << step;
  ASSERT_EQ(x.consecutive_skips, y.consecutive_skips) << "step " << step;
}

TEST(DynamicLossScale, FollowsGradScalersRuleAndCountsSkips) {
  DynamicLossScale s;
  kernels::LossScale rule;
  EXPECT_EQ(s.scale(), 65536.0);
  for (int64_t i = 0; i < 4200; ++i) {
    const bool bad = overflow_at(i);
    EXPECT_EQ(s.update(bad), !bad) << i;
    kernels::update_loss_scale(rule, bad);
    ASSERT_EQ(s.scale(), static_cast<double>(rule.scale)) << i;
  }
  EXPECT_EQ(s.skipped_steps(), 6);  // steps 3, 4, 2600, 4100-4102
  EXPECT_EQ(s.consecutive_skips(), 0);
  EXPECT_NE(s.scale(), 65536.0);  // it moved both ways
}

TEST(DynamicLossScale, ResumeFromACheckpointContinuesBitExactly) {
  test::TempDir dir;
  for (const int64_t save_at : {4, 1500, 2601, 4101}) {  // mid-burst, mid-stretch, after a change
    DynamicLossScale run;
    for (int64_t i = 0; i < save_at; ++i) run.update(overflow_at(i));
    ckpt::Checkpoint c = sample();
    const DynamicLossScale::State st = run.state();
    c.loss_scaling = ckpt::LossScaling{st.scale, st.good_steps, st.skipped_steps, st.consecutive_skips};
    const std::string path = dir.path() + "/ckpt-" + std::to_string(save_at) + ".h5";
    ckpt::write_checkpoint(path, c);
    const ckpt::Checkpoint back = ckpt::read_checkpoint(path);
    ASSERT_TRUE(back.loss_scaling.has_value());
    const ckpt::LossScaling& l = *back.loss_scaling;
    DynamicLossScale resumed;
    resumed.restore({l.scale, l.good_steps, l.skipped_steps, l.consecutive_skips});
    expect_same(run, resumed, save_at);
    for (int64_t i = save_at; i < 6500; ++i) {  // past at least one growth after the save
      ASSERT_EQ(run.update(overflow_at(i)), resumed.update(overflow_at(i)));
      expect_same(run, resumed, i);
    }
    // What restoring the scale alone would do: the next growth comes late.
    if (st.good_steps > 0) {
      DynamicLossScale scale_only;
      scale_only.restore({st.scale, 0, st.skipped_steps, st.consecutive_skips});
      DynamicLossScale again;
      again.restore(st);
      bool differed = false;
      for (int64_t i = save_at; i < 6500 && !differed; ++i) {
        scale_only.update(overflow_at(i));
        again.update(overflow_at(i));
        differed = scale_only.scale() != again.scale();
      }
      EXPECT_TRUE(differed) << "the test cannot tell a lost growth counter at step " << save_at;
    }
  }
}

TEST(DynamicLossScale, CheckpointsWithoutTheStateStillLoad) {
  test::TempDir dir;
  const std::string path = dir.path() + "/fp32.h5";
  ckpt::write_checkpoint(path, sample());  // an fp32 run, or a file from before the state was saved
  const ckpt::Checkpoint back = ckpt::read_checkpoint(path);
  EXPECT_FALSE(back.loss_scaling.has_value());
  // The file has no /loss_scaling at all (what older versions wrote).
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(H5Lexists(f, "loss_scaling", H5P_DEFAULT), 0);
  H5Fclose(f);
  // The trainer then keeps a fresh scaler: GradScaler's initial state.
  const DynamicLossScale::State fresh = DynamicLossScale().state();
  EXPECT_EQ(fresh.scale, 65536.0);
  EXPECT_EQ(fresh.good_steps + fresh.skipped_steps + fresh.consecutive_skips, 0);
}

// read_checkpoint must refuse `path` with one line containing `part`.
void expect_refused(const std::string& path, const std::string& part) {
  try {
    ckpt::read_checkpoint(path);
    ADD_FAILURE() << path << " should be refused with '" << part << "'";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(DynamicLossScale, DamagedOrImpossibleStateIsRefused) {
  test::TempDir dir;
  ckpt::Checkpoint c = sample();
  c.loss_scaling = ckpt::LossScaling{32768, 17, 3, 1};
  const std::string good = dir.path() + "/good.h5";
  ckpt::write_checkpoint(good, c);
  {  // a flipped byte in the dataset
    const std::string bad = dir.path() + "/flipped.h5";
    std::filesystem::copy_file(good, bad);
    hid_t f = H5Fopen(bad.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "loss_scaling", H5P_DEFAULT);
    const haddr_t at = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    std::fstream io(bad, std::ios::in | std::ios::out | std::ios::binary);
    char b = 0;
    io.seekg(static_cast<std::streamoff>(at + 9)).get(b);
    io.seekp(static_cast<std::streamoff>(at + 9)).put(static_cast<char>(b ^ 0x01)).flush();
    io.close();
    expect_refused(bad, "loss_scaling is damaged");
  }
  for (const auto& [scale, good_steps, part] : {std::tuple{3.0, int64_t{0}, "implausible loss scale"},
                                                {-65536.0, int64_t{0}, "implausible loss scale"},
                                                {1e300, int64_t{0}, "implausible loss scale"},
                                                {1024.0, int64_t{-1}, "implausible loss_scaling counter"}}) {
    c.loss_scaling = ckpt::LossScaling{scale, good_steps, 0, 0};
    const std::string bad = dir.path() + "/bad.h5";
    ckpt::write_checkpoint(bad, c);
    expect_refused(bad, part);
  }
  // States the file format allows but no run reaches: the trainer checks them in the agreed phase.
  DynamicLossScale s;
  EXPECT_THROW(s.restore({1024, 2000, 0, 0}), UserError);  // growth is due at 2000
  EXPECT_THROW(s.restore({1024, 0, 1, 2}), UserError);     // more in a row than in all
  EXPECT_THROW(s.restore({0.1, 0, 0, 0}), UserError);      // not a float value
  EXPECT_EQ(s.scale(), 65536.0) << "a refused state changes nothing";
}

}  // namespace
