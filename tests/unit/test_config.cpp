// Tests of the configuration: sources and their precedence, INI syntax,
// every validation error (message names the option), did-you-mean, the
// to_ini round trip, --help and --version.
//
// Each test runs with the HPCTRAIN_* environment cleared (and restored
// afterwards) and with its own temp dir holding INI files and a dummy data
// file: parse_config only checks that data.path is a readable file, not that
// it is HDF5.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/error.h"

extern char** environ;

namespace hpc {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      if (kv.rfind("HPCTRAIN_", 0) == 0) {
        size_t eq = kv.find('=');
        saved_env_.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      }
    }
    for (const auto& [name, value] : saved_env_) unsetenv(name.c_str());
    char tmpl[] = "/tmp/hpctrain_test_config_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    data_ = write_file("train.h5", "stand-in for an HDF5 file\n");
  }

  void TearDown() override {
    for (const std::string& name : set_env_) unsetenv(name.c_str());
    for (const auto& [name, value] : saved_env_) setenv(name.c_str(), value.c_str(), 1);
    std::filesystem::remove_all(dir_);
  }

  void set_env(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    set_env_.push_back(name);
  }

  std::string write_file(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // parse_config on "hpctrain ARGS…"; expects success.
  Config parse(std::vector<std::string> args) {
    args.insert(args.begin(), "hpctrain");
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    Config cfg;
    EXPECT_TRUE(parse_config(static_cast<int>(argv.size()), argv.data(), cfg));
    return cfg;
  }

  // parse with a valid --data.path appended, so that only the option under test can fail.
  Config parse_train(std::vector<std::string> args) {
    args.emplace_back("--data.path");
    args.push_back(data_);
    return parse(std::move(args));
  }

  // The UserError message of parse(args), or a test failure when none is thrown.
  std::string error_of(std::vector<std::string> args) {
    try {
      parse(std::move(args));
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "error message is not one line: " << msg;
      return msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a UserError: " << e.what();
      return "";
    }
    ADD_FAILURE() << "no error thrown";
    return "";
  }

  std::string dir_, data_;
  std::vector<std::pair<std::string, std::string>> saved_env_;
  std::vector<std::string> set_env_;
};

// Field-by-field, written out independently of the option table so that an
// option missing from to_ini() or from the table shows up here. `command` and
// `config_file` are left out: they say how the file was used, not what it holds.
void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.run_dir, b.run_dir);
  EXPECT_EQ(a.resume, b.resume);
  EXPECT_EQ(a.checkpoint, b.checkpoint);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.val_path, b.data.val_path);
  EXPECT_EQ(a.data.workers, b.data.workers);
  EXPECT_EQ(a.data.prefetch, b.data.prefetch);
  EXPECT_EQ(a.data.drop_last, b.data.drop_last);
  EXPECT_EQ(a.data.check, b.data.check);
  EXPECT_EQ(a.data.augment, b.data.augment);
  EXPECT_EQ(a.model.preset, b.model.preset);
  EXPECT_EQ(a.model.spec, b.model.spec);
  EXPECT_EQ(a.model.init, b.model.init);
  EXPECT_EQ(a.model.init_skip, b.model.init_skip);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.sync_bn, b.model.sync_bn);
  EXPECT_EQ(a.optim.name, b.optim.name);
  EXPECT_EQ(a.optim.lr, b.optim.lr);  // exact: to_ini must round-trip doubles bit for bit
  EXPECT_EQ(a.optim.momentum, b.optim.momentum);
  EXPECT_EQ(a.optim.nesterov, b.optim.nesterov);
  EXPECT_EQ(a.optim.beta1, b.optim.beta1);
  EXPECT_EQ(a.optim.beta2, b.optim.beta2);
  EXPECT_EQ(a.optim.eps, b.optim.eps);
  EXPECT_EQ(a.optim.weight_decay, b.optim.weight_decay);
  EXPECT_EQ(a.optim.clip_norm, b.optim.clip_norm);
  EXPECT_EQ(a.optim.schedule, b.optim.schedule);
  EXPECT_EQ(a.optim.warmup_steps, b.optim.warmup_steps);
  EXPECT_EQ(a.optim.step_every, b.optim.step_every);
  EXPECT_EQ(a.optim.gamma, b.optim.gamma);
  EXPECT_EQ(a.optim.min_lr, b.optim.min_lr);
  EXPECT_EQ(a.optim.lr_scaling, b.optim.lr_scaling);
  EXPECT_EQ(a.optim.base_batch, b.optim.base_batch);
  EXPECT_EQ(a.train.batch_size, b.train.batch_size);
  EXPECT_EQ(a.train.epochs, b.train.epochs);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.accum_steps, b.train.accum_steps);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.device, b.train.device);
  EXPECT_EQ(a.train.precision, b.train.precision);
  EXPECT_EQ(a.train.loss, b.train.loss);
  EXPECT_EQ(a.train.label_smoothing, b.train.label_smoothing);
  EXPECT_EQ(a.train.time_limit, b.train.time_limit);
  EXPECT_EQ(a.dist.backend, b.dist.backend);
  EXPECT_EQ(a.dist.bucket_mb, b.dist.bucket_mb);
  EXPECT_EQ(a.dist.timeout, b.dist.timeout);
  EXPECT_EQ(a.log.every, b.log.every);
  EXPECT_EQ(a.log.progress, b.log.progress);
  EXPECT_EQ(a.ckpt.every_steps, b.ckpt.every_steps);
  EXPECT_EQ(a.ckpt.every_minutes, b.ckpt.every_minutes);
  EXPECT_EQ(a.ckpt.keep, b.ckpt.keep);
  EXPECT_EQ(a.ckpt.allow_reshard, b.ckpt.allow_reshard);
  EXPECT_EQ(a.ckpt.async, b.ckpt.async);
  EXPECT_EQ(a.log.trace, b.log.trace);
  EXPECT_EQ(a.log.trace_steps, b.log.trace_steps);
}

TEST_F(ConfigTest, DefaultsAreTheStructDefaults) {
  Config cfg = parse({"--data.path", data_});
  Config expected;
  expected.data.path = data_;
  expect_same(cfg, expected);
  EXPECT_EQ(cfg.command, Command::Train);
  EXPECT_EQ(cfg.config_file, "");
  // Spot checks against config.h, in case the struct and the parser agree on a wrong default.
  EXPECT_EQ(cfg.optim.lr, 1e-3);
  EXPECT_EQ(cfg.model.hidden, (std::vector<int>{512, 512}));
  EXPECT_EQ(cfg.run_dir, "runs/default");
}

TEST_F(ConfigTest, PrecedenceCommandLineThenEnvironmentThenFileThenDefault) {
  std::string ini = write_file("run.ini", "[optim]\nlr = 0.3\nmomentum = 0.7\n[train]\nbatch_size = 33\n");
  set_env("HPCTRAIN_OPTIM_LR", "0.2");
  set_env("HPCTRAIN_OPTIM_MOMENTUM", "0.6");
  Config cfg = parse_train({"--config", ini, "--optim.lr", "0.1"});
  EXPECT_EQ(cfg.optim.lr, 0.1);         // command line beats environment and file
  EXPECT_EQ(cfg.optim.momentum, 0.6);   // environment beats file
  EXPECT_EQ(cfg.train.batch_size, 33);  // file beats default
  EXPECT_EQ(cfg.train.epochs, 5);       // default
  EXPECT_EQ(cfg.config_file, ini);

  EXPECT_EQ(parse_train({"--config", ini}).optim.lr, 0.2);
  unsetenv("HPCTRAIN_OPTIM_LR");
  EXPECT_EQ(parse_train({"--config", ini}).optim.lr, 0.3);
  EXPECT_EQ(parse_train({}).optim.lr, 1e-3);
}

TEST_F(ConfigTest, ConfigFileFromEnvironmentAndRunDirMapping) {
  std::string ini = write_file("run.ini", "[run]\ndir = runs/from_file\n[train]\nsteps = 7\n");
  set_env("HPCTRAIN_CONFIG", ini);
  Config cfg = parse_train({});
  EXPECT_EQ(cfg.train.steps, 7);
  EXPECT_EQ(cfg.run_dir, "runs/from_file");
  set_env("HPCTRAIN_RUN_DIR", "runs/from_env");
  EXPECT_EQ(parse_train({}).run_dir, "runs/from_env");
  EXPECT_EQ(parse_train({"--run.dir", "runs/cli"}).run_dir, "runs/cli");
}

TEST_F(ConfigTest, IniSectionsCommentsAndQuotes) {
  std::string ini = write_file("run.ini",
                               "# a comment\n"
                               "; another comment\n"
                               "resume = auto   # top-level option before any section\n"
                               "\n"
                               "[optim]\n"
                               "  name = sgd ; inline comment\n"
                               "lr=0.05\n"
                               "[ model ]\n"
                               "hidden = 64, 32\n"
                               "spec = \"linear(10)  # not a comment\"\n"
                               "[run]\r\n"
                               "dir = runs/a#b\n");
  Config cfg = parse_train({"--config", ini});
  EXPECT_EQ(cfg.resume, "auto");
  EXPECT_EQ(cfg.optim.name, OptimizerKind::Sgd);
  EXPECT_EQ(cfg.optim.lr, 0.05);
  EXPECT_EQ(cfg.model.hidden, (std::vector<int>{64, 32}));
  EXPECT_EQ(cfg.model.spec, "linear(10)  # not a comment");
  EXPECT_EQ(cfg.run_dir, "runs/a#b");  // '#' starts a comment only after whitespace
}

TEST_F(ConfigTest, EqualsFormAndNegativeValuesOnCommandLine) {
  Config cfg = parse_train({"--optim.lr=0.25", "--train.steps=1e3", "--model.hidden=8"});
  EXPECT_EQ(cfg.optim.lr, 0.25);
  EXPECT_EQ(cfg.train.steps, 1000);  // integer written in exponent form
  EXPECT_EQ(cfg.model.hidden, std::vector<int>{8});
  // "-0.1" is the value of --optim.lr, not an option: the range check must see it.
  EXPECT_NE(error_of({"--data.path", data_, "--optim.lr", "-0.1"})
                .find("option --optim.lr: must be > 0 (got -0.1)"),
            std::string::npos);
}

TEST_F(ConfigTest, BoolSpellings) {
  for (const char* yes : {"true", "1", "yes", "on", "TRUE", "On"}) {
    Config cfg = parse_train({"--optim.nesterov", yes, "--data.drop_last", yes});
    EXPECT_TRUE(cfg.optim.nesterov) << yes;
    EXPECT_TRUE(cfg.data.drop_last) << yes;
  }
  for (const char* no : {"false", "0", "no", "off", "False"}) {
    Config cfg = parse_train({"--optim.nesterov", no, "--data.drop_last", no});
    EXPECT_FALSE(cfg.optim.nesterov) << no;
    EXPECT_FALSE(cfg.data.drop_last) << no;
  }
  EXPECT_NE(error_of({"--data.path", data_, "--ckpt.allow_reshard", "maybe"}).find("ckpt.allow_reshard"),
            std::string::npos);
  // model.sync_bn is auto|true|false and takes the bool spellings for the last two.
  EXPECT_EQ(parse_train({"--model.sync_bn", "on"}).model.sync_bn, SyncBn::On);
  EXPECT_EQ(parse_train({"--model.sync_bn", "0"}).model.sync_bn, SyncBn::Off);
  EXPECT_EQ(parse_train({"--model.sync_bn", "AUTO"}).model.sync_bn, SyncBn::Auto);
}

TEST_F(ConfigTest, SubCommands) {
  EXPECT_EQ(parse_train({}).command, Command::Train);
  EXPECT_EQ(parse({"train", "--data.path", data_}).command, Command::Train);
  EXPECT_EQ(parse({"eval", "--checkpoint", data_, "--data.path", data_}).command, Command::Eval);
  EXPECT_EQ(parse({"doctor"}).command, Command::Doctor);  // needs no data
  Config sample = parse({"sample", "--checkpoint", data_});
  EXPECT_EQ(sample.command, Command::Sample);
  EXPECT_EQ(sample.checkpoint, data_);

  EXPECT_NE(error_of({"trian"}).find("did you mean train?"), std::string::npos);
  EXPECT_NE(error_of({"eval", "--data.path", data_}).find("--checkpoint"), std::string::npos);
  EXPECT_NE(error_of({"--data.path", data_, "eval"}).find("command must come first"), std::string::npos);
  // An option the command does not use, on its command line, is an error (a shared INI file may hold it).
  EXPECT_EQ(error_of({"eval", "--checkpoint", data_, "--data.path", data_, "--run.dir", "runs/x"}),
            "option --run.dir: not used by 'hpctrain eval' (it writes eval.json beside the checkpoint, or to "
            "--out)");
  EXPECT_NE(error_of({"export", "--checkpoint", data_, "-o", "out", "--run.dir", "runs/x"})
                .find("option --run.dir: not used by 'hpctrain export'"),
            std::string::npos);
  const std::string ini = write_file("shared.ini", "[run]\ndir = runs/x\n");
  EXPECT_EQ(parse({"eval", "--checkpoint", data_, "--data.path", data_, "--config", ini}).run_dir, "runs/x");
  EXPECT_EQ(parse({"doctor", "--run.dir", "runs/x"}).run_dir, "runs/x");
}

struct BadCase {
  std::vector<std::string> args;
  std::string option;  // the message must name it
  std::string detail;  // and say this
};

TEST_F(ConfigTest, EveryBadValueIsAUserErrorNamingTheOption) {
  const std::vector<BadCase> cases = {
      {{"--optim.lr", "-0.1"}, "optim.lr", "must be > 0"},
      {{"--optim.lr", "0"}, "optim.lr", "must be > 0"},
      {{"--optim.lr", "abc"}, "optim.lr", "not a number"},
      {{"--optim.lr", "1e"}, "optim.lr", "not a number"},
      {{"--optim.lr", "0.1x"}, "optim.lr", "not a number"},
      {{"--optim.lr", "nan"}, "optim.lr", "finite"},
      {{"--train.batch_size", "0"}, "train.batch_size", ">= 1"},
      {{"--train.batch_size", "5x"}, "train.batch_size", "not an integer"},
      {{"--train.steps", "1.5"}, "train.steps", "not an integer"},
      {{"--train.accum_steps", "0"}, "train.accum_steps", ">= 1"},
      {{"--train.micro_batches", "0"}, "train.micro_batches", ">= 1"},
      {{"--train.batch_size", "8", "--train.micro_batches", "3"}, "train.micro_batches", "does not divide"},
      {{"--dist.pp", "4", "--train.micro_batches", "2"}, "train.micro_batches", "fewer than the 4 pipeline"},
      {{"--dist.pp_virtual", "2"}, "dist.pp_virtual", "needs pipeline parallelism"},
      {{"--dist.pp_split", "2,2"}, "dist.pp_split", "needs pipeline parallelism"},
      {{"--train.epochs", "0", "--train.steps", "0"}, "train.epochs", "must be > 0"},
      {{"--train.epochs", "-1"}, "train.epochs", ">= 0"},
      {{"--train.seed", "-3"}, "train.seed", ">= 0"},
      {{"--optim.name", "adm"}, "optim.name", "sgd, adam, adamw"},
      {{"--optim.schedule", "linear"}, "optim.schedule", "constant, step, cosine"},
      {{"--optim.lr_scaling", "sqrt"}, "optim.lr_scaling", "none, linear"},
      {{"--train.device", "gpu"}, "train.device", "auto, cpu, cuda"},
      {{"--train.precision", "fp8"}, "train.precision", "fp32, bf16, fp16"},
      {{"--train.loss", "hinge"}, "train.loss", "auto, ce, mse"},
      {{"--dist.backend", "gloo"}, "dist.backend", "auto, mpi, nccl"},
      {{"--log.progress", "fancy"}, "log.progress", "auto, bar, plain, none"},
      {{"--data.check", "deep"}, "data.check", "quick, full"},
      {{"--model.sync_bn", "sometimes"}, "model.sync_bn", "auto, true, false"},
      {{"--model.preset", "resnet18"},
       "model.preset",
       "simplenet, mlp, lenet5, cnn, resnet20, resnet50, gpt-tiny"},
      {{"--optim.beta1", "1"}, "optim.beta1", "[0, 1)"},
      {{"--optim.beta2", "-0.5"}, "optim.beta2", "[0, 1)"},
      {{"--optim.momentum", "-0.9"}, "optim.momentum", ">= 0"},
      {{"--optim.weight_decay", "-1e-4"}, "optim.weight_decay", ">= 0"},
      {{"--optim.clip_norm", "-1"}, "optim.clip_norm", ">= 0"},
      {{"--optim.warmup_steps", "-10"}, "optim.warmup_steps", ">= 0"},
      {{"--optim.schedule", "cosine", "--optim.min_lr", "0.5"}, "optim.min_lr", "optim.lr"},
      {{"--data.workers", "0"}, "data.workers", ">= 1"},
      {{"--data.prefetch", "0"}, "data.prefetch", ">= 1"},
      {{"--dist.bucket_mb", "0"}, "dist.bucket_mb", "> 0"},
      {{"--dist.timeout", "-5"}, "dist.timeout", "> 0"},
      {{"--ckpt.keep", "0"}, "ckpt.keep", ">= 1"},
      {{"--model.hidden", "512,,512"}, "model.hidden", "positive integers"},
      {{"--model.hidden", "512,-1"}, "model.hidden", "positive integers"},
      {{"--model.hidden", "0"}, "model.hidden", "positive integers"},
      {{"--model.hidden", "wide"}, "model.hidden", "positive integers"},
      {{"--run.dir", ""}, "run.dir", "empty"},
      {{"--resume", "/nonexistent/ckpt.h5"}, "resume", "cannot open"},
      {{"--optim.lrr", "0.1"}, "optim.lrr", "did you mean --optim.lr?"},
      {{"--lr", "0.1"}, "--lr", "did you mean --optim.lr?"},
      {{"--optim.lr", "0.1", "--optim.lr", "0.2"}, "optim.lr", "more than once"},
      {{"--optim.lr"}, "optim.lr", "missing value"},
      {{"--config", "/nonexistent/run.ini"}, "--config", "cannot read"},
  };
  for (const BadCase& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.begin(), {"--data.path", data_});
    std::string msg = error_of(args);
    EXPECT_NE(msg.find(c.option), std::string::npos) << "args " << c.args[0] << ": " << msg;
    EXPECT_NE(msg.find(c.detail), std::string::npos) << "args " << c.args[0] << ": " << msg;
  }
}

TEST_F(ConfigTest, DataPathIsRequiredAndChecked) {
  std::string msg = error_of({});
  EXPECT_NE(msg.find("data.path"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hpcdata pack --from mnist-idx DIR -o train.h5"), std::string::npos) << msg;
  msg = error_of({"--data.path", dir_ + "/missing.h5"});
  EXPECT_NE(msg.find("option --data.path: cannot open"), std::string::npos) << msg;
  msg = error_of({"--data.path", dir_});
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  if (geteuid() != 0) {  // root reads everything, so the unreadable case only exists for others
    chmod(data_.c_str(), 0);
    msg = error_of({"--data.path", data_});
    EXPECT_NE(msg.find("cannot read"), std::string::npos) << msg;
  }
}

TEST_F(ConfigTest, EnvironmentErrorsNameTheVariable) {
  set_env("HPCTRAIN_OPTIM_LR", "fast");
  std::string msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("option --optim.lr (from environment HPCTRAIN_OPTIM_LR): not a number"),
            std::string::npos)
      << msg;
  unsetenv("HPCTRAIN_OPTIM_LR");

  set_env("HPCTRAIN_OPTIM_LRR", "0.1");
  msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("did you mean HPCTRAIN_OPTIM_LR?"), std::string::npos) << msg;
  unsetenv("HPCTRAIN_OPTIM_LRR");

  set_env("HPCTRAIN_TEST_ANYTHING", "1");  // the documented allow-list
  set_env("HPCTRAIN_FAULT_RANK", "1");
  set_env("HPCTRAIN_STARTED_FILE", "/tmp/started");  // set by slurm/common.sh for every job
  EXPECT_EQ(parse_train({}).optim.lr, 1e-3);
}

// The CPU backend's switches are read before any configuration; a misspelt
// name or a value other than the one would otherwise leave the default on
// without a word, and an A/B comparison would measure the same path twice.
TEST_F(ConfigTest, CpuSwitchesAreCheckedByNameAndValue) {
  for (const char* good : {"none", ""}) {
    set_env("HPCTRAIN_CPU_FUSE", good);
    EXPECT_EQ(parse_train({}).optim.lr, 1e-3) << "HPCTRAIN_CPU_FUSE=" << good;
  }
  set_env("HPCTRAIN_CPU_FUSE", "off");
  std::string msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("HPCTRAIN_CPU_FUSE=off: its one value is none (every relu as its own pass)"),
            std::string::npos)
      << msg;
  unsetenv("HPCTRAIN_CPU_FUSE");
  set_env("HPCTRAIN_CPU_LAYOUT", "NCHW");
  msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("HPCTRAIN_CPU_LAYOUT=NCHW: its one value is nchw"), std::string::npos) << msg;
  unsetenv("HPCTRAIN_CPU_LAYOUT");
  set_env("HPCTRAIN_CPU_GEM", "openblas");
  msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("unknown environment variable HPCTRAIN_CPU_GEM; did you mean HPCTRAIN_CPU_GEMM?"),
            std::string::npos)
      << msg;
  unsetenv("HPCTRAIN_CPU_GEM");
  // HPCTRAIN_CPU_CONV_ALGO shares a prefix with HPCTRAIN_CPU_CONV: each is its own switch.
  set_env("HPCTRAIN_CPU_CONV_ALGO", "winograd");
  msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("HPCTRAIN_CPU_CONV_ALGO=winograd: its one value is direct"), std::string::npos) << msg;
  set_env("HPCTRAIN_CPU_CONV_ALGO", "direct");
  EXPECT_EQ(parse_train({}).optim.lr, 1e-3);
  unsetenv("HPCTRAIN_CPU_CONV_ALGO");
  set_env("HPCTRAIN_CPU_CONV_ALG", "direct");
  msg = error_of({"--data.path", data_});
  EXPECT_NE(msg.find("did you mean HPCTRAIN_CPU_CONV_ALGO?"), std::string::npos) << msg;
  unsetenv("HPCTRAIN_CPU_CONV_ALG");
}

TEST_F(ConfigTest, IniErrorsNameFileAndLine) {
  auto ini_error = [&](const std::string& text) {
    return error_of({"--data.path", data_, "--config", write_file("bad.ini", text)});
  };
  std::string msg = ini_error("[optim]\nlr = 0.1\nthis line has no equals sign\n");
  EXPECT_NE(msg.find("bad.ini:3:"), std::string::npos) << msg;
  msg = ini_error("[optim\nlr = 0.1\n");
  EXPECT_NE(msg.find("bad.ini:1:"), std::string::npos) << msg;
  msg = ini_error("# c\n[optim]\nlrr = 0.1\n");
  EXPECT_NE(msg.find("bad.ini:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean optim.lr?"), std::string::npos) << msg;
  msg = ini_error("[optm]\nlr = 0.1\n");
  EXPECT_NE(msg.find("did you mean [optim]?"), std::string::npos) << msg;
  msg = ini_error("[optim]\nlr = 0.1\nlr = 0.2\n");
  EXPECT_NE(msg.find("bad.ini:3: optim.lr is set twice (first on line 2)"), std::string::npos) << msg;
  msg = ini_error("config = other.ini\n");
  EXPECT_NE(msg.find("bad.ini:1: config cannot be set"), std::string::npos) << msg;
  msg = ini_error("[train]\n\nbatch_size = -4\n");
  EXPECT_NE(msg.find("option --train.batch_size (from " + dir_ + "/bad.ini:3): must be >= 1 (got -4)"),
            std::string::npos)
      << msg;
  msg = ini_error("[model]\nspec = \"unterminated\n");
  EXPECT_NE(msg.find("bad.ini:2: model.spec"), std::string::npos) << msg;
}

TEST_F(ConfigTest, ToIniRoundTripsEveryField) {
  // Every field differs from its default, so an option that to_ini() forgets
  // would come back as the default and fail expect_same.
  Config c;
  c.run_dir = "runs/with # hash and spaces ";
  c.resume = "auto";
  c.checkpoint = data_;
  c.data = {data_, data_, 3, 5, false, DataCheck::Full, "flip, crop:4"};
  c.model.preset = "resnet20";
  c.model.spec = "\"quoted\" conv(8,3) ; relu\nlinear(10)";
  c.model.init = data_;
  c.model.init_skip = "5.linear, 0.conv.bias";
  c.model.hidden = {7, 11, 13};
  c.model.sync_bn = SyncBn::On;
  c.optim.name = OptimizerKind::AdamW;
  c.optim.lr = 1.0 / 3.0;  // needs all 17 digits
  c.optim.momentum = 0.1;
  c.optim.nesterov = true;
  c.optim.beta1 = 0.8;
  c.optim.beta2 = 0.95;
  c.optim.eps = 1e-12;
  c.optim.weight_decay = 5e-4;
  c.optim.clip_norm = 1.5;
  c.optim.schedule = ScheduleKind::Step;  // the default is cosine
  c.optim.warmup_steps = 100;
  c.optim.step_every = 17;
  c.optim.gamma = 0.5;
  c.optim.min_lr = 2.0 / 3e6;
  c.optim.lr_scaling = LrScaling::Linear;
  c.optim.base_batch = 512;
  c.train = {
      128,           9,   1234567890123, 4, 2, 18446744073709551615ull, DeviceChoice::Cpu, Precision::Bf16,
      LossKind::Mse, 0.1, 3600.5};
  c.dist = DistConfig();
  c.dist.backend = CommBackend::Mpi;
  c.dist.bucket_mb = 12.5;
  c.dist.timeout = 60;
  c.log = {10, ProgressStyle::Plain, "trace.json", "2:9"};
  c.ckpt = {250, 7.25, 2, true, false};

  std::string ini = write_file("resolved.ini", to_ini(c));
  Config back = parse({"--config", ini});
  expect_same(back, c);
  EXPECT_EQ(to_ini(back), to_ini(c));
}

// A run given --model.spec writes its preset as unused (the preset is not what it trained), and
// the line still reads back; without a spec the preset line is plain.
TEST_F(ConfigTest, ToIniMarksThePresetUnusedBesideASpec) {
  Config c;
  c.data.path = data_;
  EXPECT_NE(to_ini(c).find("\npreset = cnn\n"), std::string::npos) << to_ini(c);
  c.model.spec = "flatten linear(10)";
  const std::string ini = to_ini(c);
  EXPECT_NE(ini.find("\npreset = cnn  # not used: model.spec replaces it\n"), std::string::npos) << ini;
  Config back = parse({"--config", write_file("spec.ini", ini)});
  EXPECT_EQ(back.model.preset, "cnn");
  EXPECT_EQ(back.model.spec, c.model.spec);
}

TEST_F(ConfigTest, HelpAndVersionReturnFalse) {
  Config cfg;
  const char* help[] = {"hpctrain", "--help"};
  testing::internal::CaptureStdout();
  EXPECT_FALSE(parse_config(2, help, cfg));
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("usage: hpctrain"), std::string::npos);
  EXPECT_NE(out.find("--optim.lr FLOAT"), std::string::npos);
  EXPECT_NE(out.find("(default: 0.001)"), std::string::npos);
  EXPECT_NE(out.find("MiB"), std::string::npos);
  EXPECT_NE(out.find("seconds"), std::string::npos);
  EXPECT_NE(out.find("\noptim:\n"), std::string::npos);

  const char* version[] = {"hpctrain", "doctor", "--version"};
  testing::internal::CaptureStdout();
  EXPECT_FALSE(parse_config(3, version, cfg));
  EXPECT_EQ(testing::internal::GetCapturedStdout(), version_report());
}

TEST_F(ConfigTest, VersionReportNamesEveryLibrary) {
  std::string v = version_report();
  EXPECT_EQ(v.rfind("hpctrain ", 0), 0u) << v;
  EXPECT_NE(v.find("(commit "), std::string::npos);
  for (const char* lib : {"CUDA", "MPI:", "HDF5:", "Boost:", "BLAS:", "compiler:"})
    EXPECT_NE(v.find(lib), std::string::npos) << lib << " missing from\n" << v;
}

}  // namespace
}  // namespace hpc
