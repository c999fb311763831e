// hpctrain eval / predict (see eval_command.h).
#include "train/eval_command.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/cpu/threads.h"
#include "backend/ops.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "data/h5_handle.h"
#include "train/device_choice.h"
#include "train/evaluation.h"
#include "train/metrics.h"
#include "train/mixed_precision.h"
#include "train/model_source.h"

namespace hpc::train {

namespace {

// The training run's configuration, read back from the checkpoint's INI
// text, with this command's data, device and loader settings on top.
Config run_config(const ModelSource& c, const Config& cfg) {
  const std::string& what = c.what;
  if (!c.checkpoint) {  // weights without a run: this command's options, the model the source's
    Config run = cfg;
    run.model.spec = c.spec;
    run.model.context = c.input_shape.rank() == 1 ? c.input_shape[0] : 0;
    return run;
  }
  if (c.config_ini.empty()) throw UserError(what + ": holds no run configuration");
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("hpctrain-eval-" + std::to_string(getpid()) + ".ini");
  {
    // The run's file names are not this command's (and may be gone): left out, the command's own apply.
    std::istringstream in(c.config_ini);
    std::ofstream f(tmp);
    for (std::string line; std::getline(in, line);) {
      const std::string key = line.substr(0, line.find_first_of(" =\t"));
      if (key != "path" && key != "val_path" && key != "resume" && key != "checkpoint") f << line << "\n";
    }
    if (!f) throw UserError("cannot write the temporary file " + tmp.string());
  }
  std::vector<std::string> args = {"hpctrain",
                                   "--config",
                                   tmp.string(),
                                   "--data.path=" + cfg.data.path,
                                   "--data.workers=" + std::to_string(cfg.data.workers),
                                   "--data.prefetch=" + std::to_string(cfg.data.prefetch),
                                   std::string("--train.device=") + name_of(cfg.train.device)};
  if (!cfg.data.val_path.empty()) args.push_back("--data.val_path=" + cfg.data.val_path);
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& a : args) argv.push_back(a.c_str());
  Config run;
  try {
    parse_config(static_cast<int>(argv.size()), argv.data(), run);
  } catch (const Error& e) {
    std::filesystem::remove(tmp);
    throw UserError(what + ": its run configuration: " + e.what());
  }
  std::filesystem::remove(tmp);
  return run;
}

// UserError unless a model taking `in` and giving `out` fits split `info` of task `task`.
void check_fits(const Task& task, const data::SplitInfo& info, const Shape& in, const Shape& out,
                const std::string& data_what, const std::string& ckpt_what) {
  if (!(info.sample_shape == in))
    throw UserError(data_what + ": samples are " + info.sample_shape.str() + " but the model of " +
                    ckpt_what + " takes " + in.str());
  if (task.language_model()) {
    if (out.rank() != 2 || out[1] < info.num_classes)
      throw UserError(data_what + ": token ids up to " + std::to_string(info.num_classes - 1) +
                      " but the model of " + ckpt_what + " gives " + out.str() + " logits");
  } else if (task.kind() == Task::Kind::Classification) {
    if (info.num_classes > out.count())
      throw UserError(data_what + ": " + std::to_string(info.num_classes) + " classes but the model of " +
                      ckpt_what + " predicts " + std::to_string(out.count()));
  } else if (info.target_shape.count() != out.count()) {
    throw UserError(data_what + ": " + std::to_string(info.target_shape.count()) +
                    " targets per sample but the model of " + ckpt_what + " gives " +
                    std::to_string(out.count()));
  }
}

// Writes `text` to `path` so that the file is complete or absent: PATH.tmp-PID, then rename.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp);
      throw UserError("cannot write '" + path + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::filesystem::remove(tmp);
    throw UserError("cannot write '" + path + "' (rename failed)");
  }
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// /probs, /pred, /output, /logits of `hpctrain predict`, written by rank 0 into PATH.tmp-PID.
class PredFile {
 public:
  PredFile(const std::string& path, int64_t n, const Shape& out, Task::Kind kind)
      : path_(path), tmp_(path + ".tmp-" + std::to_string(getpid())), out_(out), kind_(kind) {
    auto lock = data::h5_lock();
    file_ =
        data::H5Handle(H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "file");
    if (!file_.valid()) throw UserError("cannot create '" + tmp_ + "' for --out " + path_);
    std::vector<hsize_t> full = {static_cast<hsize_t>(n)};
    for (int i = 0; i < out.rank(); ++i) full.push_back(static_cast<hsize_t>(out[i]));
    if (kind == Task::Kind::Regression) {
      output_ = dataset("output", full, H5T_IEEE_F32LE);
    } else {
      logits_ = dataset("logits", full, H5T_IEEE_F32LE);
      if (kind == Task::Kind::Classification) {
        probs_ =
            dataset("probs", {static_cast<hsize_t>(n), static_cast<hsize_t>(out.count())}, H5T_IEEE_F32LE);
        pred_ = dataset("pred", {static_cast<hsize_t>(n)}, H5T_STD_I32LE);
      }
    }
  }
  ~PredFile() {
    if (!done_) {
      auto lock = data::h5_lock();
      file_.reset();
      std::filesystem::remove(tmp_);
    }
  }

  // Rows [first, first + count) of the model output, `width` floats each.
  void write(int64_t first, int64_t count, const float* logits) {
    const int64_t width = out_.count();
    auto lock = data::h5_lock();
    if (kind_ == Task::Kind::Regression) {
      rows(output_, first, count, width, H5T_NATIVE_FLOAT, logits);
      return;
    }
    rows(logits_, first, count, width, H5T_NATIVE_FLOAT, logits);
    if (kind_ != Task::Kind::Classification) return;
    std::vector<float> probs(static_cast<size_t>(count * width));
    std::vector<int32_t> pred(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const float* z = logits + i * width;
      const int64_t best =
          std::max_element(z, z + width) - z;  // ties to the lower class, as the loss's top-1
      double sum = 0;
      for (int64_t j = 0; j < width; ++j) sum += std::exp(double(z[j]) - z[best]);
      for (int64_t j = 0; j < width; ++j)
        probs[static_cast<size_t>(i * width + j)] =
            static_cast<float>(std::exp(double(z[j]) - z[best]) / sum);
      pred[static_cast<size_t>(i)] = static_cast<int32_t>(best);
    }
    rows(probs_, first, count, width, H5T_NATIVE_FLOAT, probs.data());
    rows(pred_, first, count, 1, H5T_NATIVE_INT32, pred.data());
  }

  void commit() {
    auto lock = data::h5_lock();
    output_.reset();
    logits_.reset();
    probs_.reset();
    pred_.reset();
    if (file_.close() < 0) throw UserError("cannot write '" + tmp_ + "' for --out " + path_);
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      throw UserError("cannot rename '" + tmp_ + "' to '" + path_ + "'");
    done_ = true;
  }

 private:
  data::H5Handle dataset(const char* name, const std::vector<hsize_t>& shape, hid_t type) {
    data::H5Handle space(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr), H5Sclose,
                         "dataspace");
    data::H5Handle d(H5Dcreate2(file_.id(), name, type, space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose, "dataset");
    if (!d.valid()) throw UserError("cannot create /" + std::string(name) + " in '" + tmp_ + "'");
    return d;
  }
  void rows(const data::H5Handle& d, int64_t first, int64_t count, int64_t width, hid_t mem_type,
            const void* buf) {
    data::H5Handle space(H5Dget_space(d.id()), H5Sclose, "dataspace");
    const int rank = H5Sget_simple_extent_ndims(space.id());
    std::vector<hsize_t> start(static_cast<size_t>(rank), 0), cnt(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.id(), cnt.data(), nullptr);
    start[0] = static_cast<hsize_t>(first);
    cnt[0] = static_cast<hsize_t>(count);
    H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr);
    const hsize_t total = static_cast<hsize_t>(count) * static_cast<hsize_t>(width);
    data::H5Handle mem(H5Screate_simple(1, &total, nullptr), H5Sclose, "dataspace");
    if (H5Dwrite(d.id(), mem_type, mem.id(), space.id(), H5P_DEFAULT, buf) < 0)
      throw UserError("cannot write to '" + tmp_ + "' (disk full?)");
  }

  std::string path_, tmp_;
  Shape out_;
  Task::Kind kind_;
  data::H5Handle file_, output_, logits_, probs_, pred_;
  bool done_ = false;
};

}  // namespace

// Everything set-up made; run() uses it.
class EvalSession {
 public:
  EvalSession(const Config& cfg, dist::Context& ctx) : cfg_(cfg), ctx_(ctx), ckpt_(load_model_source(cfg)) {
    run_ = run_config(ckpt_, cfg);
    data_ = open_run_data(run_);
    const bool has_val = data_.val != nullptr;
    if (cfg.eval.split == EvalSplit::Val && !has_val)
      throw UserError("data file '" + cfg.data.path +
                      "' has no validation split (/val or --data.val_path): use --eval.split train");
    use_val_ = cfg.eval.split == EvalSplit::Val || (cfg.eval.split == EvalSplit::Auto && has_val);
    split_name_ = use_val_ ? "val" : "train";
    const data::Dataset& split = this->split();

    device_ = resolve_rank_device(cfg.train.device, ctx);
    backend::cpu::configure_threads(ctx.info().local_size);
    const std::string ckpt_what = ckpt_.what;
    model_ =
        std::make_unique<nn::Model>(ckpt_.spec, ckpt_.input_shape,
                                    MixedPrecision::model_dtype(run_.train.precision, device_), 0, device_);
    check_fits(data_.task, split.info(), model_->input_shape(), model_->output_shape(),
               "data file '" + cfg.data.path + "': /" + split_name_, ckpt_what);
    load_state(ckpt_what);
    loss_ = data_.task.make_loss(run_.train, data_.train->info());
    rows_ = ckpt_.batch_size > 0 ? ckpt_.batch_size : run_.train.batch_size;
    upload_ = std::make_unique<BatchUpload>(device_, model_->dtype(), model_->input_dtype());
    loader_ = std::make_unique<data::Loader>(
        split, rows_,
        data::LoaderOptions{cfg.data.workers, cfg.data.prefetch, BatchUpload::host_allocator(device_)});
  }

  int run() {
    EvalInputs in;
    in.split = &split();
    in.model = model_.get();
    in.loss = loss_.get();
    in.upload = upload_.get();
    in.loader = loader_.get();
    in.comm = &ctx_.host_comm();
    in.rows = rows_;
    in.seed = run_.train.seed;
    const data::SplitInfo& info = split().info();
    in.top5 = data_.task.counts_top5(info);
    if (ctx_.is_root())
      std::printf("%s: %s (step %lld) on %s /%s: %lld %s, batch %lld, %d rank(s), %s\n",
                  name_of(cfg_.command), ckpt_.path.c_str(), static_cast<long long>(ckpt_.step),
                  cfg_.data.path.c_str(), split_name_.c_str(), static_cast<long long>(info.size),
                  data_.task.sample_word(), static_cast<long long>(rows_), ctx_.world(),
                  device_ == Device::CUDA ? "cuda" : "cpu");
    return cfg_.command == Command::Predict ? predict(in) : evaluate(in);
  }

 private:
  const data::Dataset& split() const { return use_val_ ? *data_.val : *data_.train; }

  void load_state(const std::string& what) {
    if (ckpt_.num_params() != model_->num_params())
      throw UserError(what + ": " + std::to_string(ckpt_.num_params()) +
                      " parameters stored but its model spec has " + std::to_string(model_->num_params()));
    put(ckpt_.params.view(model_->params().shape()), model_->params());
    for (auto& [name, t] : model_->buffers()) {
      auto it = std::find_if(ckpt_.buffers.begin(), ckpt_.buffers.end(),
                             [&n = name](const auto& b) { return b.name == n; });
      if (it == ckpt_.buffers.end() || it->value.count() != t.count())
        throw UserError(what + ": buffer '" + name + "' is missing or has the wrong size");
      put(it->value.view(t.shape()), t);
    }
  }
  // Host float32 `src` into `dst` (any device, any float dtype).
  static void put(const Tensor& src, const Tensor& dst) {
    if (dst.dtype() == DType::F32) {
      backend::copy(src, dst);
      return;
    }
    Tensor staged(src.shape(), DType::F32, dst.device());
    backend::copy(src, staged);
    backend::convert(staged, dst);
  }

  int evaluate(const EvalInputs& in) {
    const bool classes = data_.task.kind() == Task::Kind::Classification;
    EvalDetail detail;
    detail.classes = classes ? model_->output_shape().count() : 0;
    const auto t0 = std::chrono::steady_clock::now();
    const EvalResult r = evaluate_split(in, classes ? &detail : nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ctx_.is_root()) return EXIT_OK;
    std::printf("%s\n", data_.task.final_line(r, use_val_ ? "validation" : "training").c_str());
    const double samples = static_cast<double>(split().info().size);
    std::printf("eval time: %.3f s, %.0f %s/s on %d rank(s)\n", seconds, samples / std::max(seconds, 1e-9),
                data_.task.sample_word(), ctx_.world());
    std::ostringstream js;
    js << "{\"checkpoint\": " << json_quote(ckpt_.path) << ", \"seconds\": " << json_number(seconds)
       << ", \"step\": " << ckpt_.step << ", \"split\": " << json_quote(split_name_)
       << ", \"count\": " << r.count << ", \"val_loss\": " << json_number(r.loss)
       << ", \"val_acc\": " << json_number(r.acc);
    if (r.top5 >= 0) js << ", \"val_top5\": " << json_number(r.top5);
    if (data_.task.language_model()) js << ", \"val_ppl\": " << json_number(std::exp(r.loss));
    if (classes) {
      std::string line = "per-class accuracy:";
      js << ", \"per_class_acc\": [";
      for (int64_t c = 0; c < detail.classes; ++c) {
        const double a = detail.class_acc(c);
        js << (c ? ", " : "") << (a < 0 ? "null" : json_number(a));
        char part[48];
        if (a >= 0)
          std::snprintf(part, sizeof part, "  %lld %.2f%%", static_cast<long long>(c), 100 * a);
        else
          std::snprintf(part, sizeof part, "  %lld -", static_cast<long long>(c));
        line += part;
      }
      js << "], \"confusion\": [";
      for (int64_t t = 0; t < detail.classes; ++t) {
        js << (t ? ", " : "") << "[";
        for (int64_t p = 0; p < detail.classes; ++p)
          js << (p ? ", " : "") << detail.confusion[static_cast<size_t>(t * detail.classes + p)];
        js << "]";
      }
      js << "]";
      std::printf("%s\n", line.c_str());
    }
    js << "}\n";
    // Beside the checkpoint or file, or inside a model directory.
    const std::filesystem::path beside = std::filesystem::is_directory(ckpt_.path)
                                             ? std::filesystem::path(ckpt_.path)
                                             : std::filesystem::path(ckpt_.path).parent_path();
    const std::string out = !cfg_.eval.out.empty() ? cfg_.eval.out : (beside / "eval.json").string();
    write_atomically(out, js.str());
    std::printf("wrote %s\n", out.c_str());
    std::fflush(stdout);
    return EXIT_OK;
  }

  int predict(const EvalInputs& in) {
    const int64_t n = split().info().size, width = model_->output_shape().count();
    const int world = ctx_.world();
    // This rank's batches' outputs, item j = batch j·W + r, kept until the gather below.
    std::vector<std::vector<float>> outs;
    evaluate_split(in, nullptr, [&](int64_t, int64_t valid, const Tensor& h) {
      outs.emplace_back(h.data<float>(), h.data<float>() + valid * width);
    });
    std::unique_ptr<PredFile> file;
    if (ctx_.is_root())
      file = std::make_unique<PredFile>(cfg_.eval.out, n, model_->output_shape(), data_.task.kind());
    const int64_t batches = eval_batches(n, rows_), rounds = (batches + world - 1) / world;
    Tensor send(Shape{rows_ * width}, DType::F32), recv(Shape{world * rows_ * width}, DType::F32);
    for (int64_t j = 0; j < rounds; ++j) {
      float* s = send.data<float>();
      std::fill(s, s + send.count(), 0.0f);
      if (j < static_cast<int64_t>(outs.size())) std::copy(outs[j].begin(), outs[j].end(), s);
      ctx_.host_comm().allgather(send, recv);
      if (!file) continue;
      for (int r = 0; r < world; ++r) {
        const int64_t b = j * world + r;
        if (b >= batches) break;
        file->write(b * rows_, std::min(rows_, n - b * rows_), recv.data<float>() + r * rows_ * width);
      }
    }
    if (!file) return EXIT_OK;
    file->commit();
    std::printf("wrote %s: %lld %s\n", cfg_.eval.out.c_str(), static_cast<long long>(n),
                data_.task.kind() == Task::Kind::Classification ? "rows of /probs and /pred"
                : data_.task.kind() == Task::Kind::Regression   ? "rows of /output"
                                                                : "rows of /logits");
    std::fflush(stdout);
    return EXIT_OK;
  }

  const Config& cfg_;
  dist::Context& ctx_;
  ModelSource ckpt_;  // the checkpoint, or --model.init's weights
  Config run_;
  RunData data_;
  bool use_val_ = true;
  std::string split_name_;
  Device device_ = Device::CPU;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<nn::Loss> loss_;
  std::unique_ptr<BatchUpload> upload_;
  std::unique_ptr<data::Loader> loader_;  // last: its threads stop before the data goes away
  int64_t rows_ = 0;
};

EvalCommand::EvalCommand(const Config& cfg, dist::Context& ctx)
    : s_(std::make_unique<EvalSession>(cfg, ctx)) {}
EvalCommand::~EvalCommand() = default;
int EvalCommand::run() { return s_->run(); }

}  // namespace hpc::train
