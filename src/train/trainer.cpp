// Trainer (see trainer.h).
#include "train/trainer.h"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "backend/cpu/threads.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "config/config.h"
#include "core/error.h"
#include "dist/devices.h"
#include "dist/fault_injection.h"
#include "nn/spec.h"
#include "train/device_choice.h"

namespace hpc::train {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t MAX_CONSECUTIVE_SKIPS = 64;  // fp16 overflows in a row: 2^-48 of the initial loss scale
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The compute device (train.device resolved by train/device_choice.h from
// this rank's view and, with several ranks, whether every rank sees a GPU:
// one Max allreduce over the host communicator). On the GPU, the device is
// local rank mod the visible ones, made current here.
Device choose_device(const std::string& want, dist::Context& ctx) {
  DeviceView view;
  view.cuda_built = backend::cuda_built();
  if (!device_needs_probe(want)) return resolve_device(want, view);  // cpu: the CUDA runtime is not started
  if (view.cuda_built) view.visible_gpus = backend::cuda_device_count();
  if (ctx.world() > 1) {
    // Max of (world − rank) over the ranks without a GPU names the lowest of them.
    int32_t lacking = view.visible_gpus == 0 ? ctx.world() - ctx.rank() : 0;
    ctx.host_comm().allreduce(Tensor::borrow(&lacking, Shape{1}, DType::I32), dist::ReduceOp::Max);
    view.every_rank_has_gpu = lacking == 0;
    view.first_rank_without_gpu = lacking == 0 ? -1 : ctx.world() - lacking;
  }
  const Device device = resolve_device(want, view);
  if (device == Device::CUDA)
    backend::cuda_set_device(dist::pick_device(ctx.info().local_rank, view.visible_gpus));
  return device;
}

// A language model's window length: model.context when set, else the T of
// the spec's embed(vocab, width, T) layer (what the gpt presets build).
int64_t lm_context(const ModelConfig& m) {
  if (m.context > 0) return m.context;
  const std::string spec = m.spec.empty() ? nn::preset_spec(m, 0) : m.spec;
  for (const nn::LayerArgs& a : nn::parse_spec(spec))
    if (a.name == "embed" && a.positional.size() >= 3 && a.positional[2] >= 1)
      return static_cast<int64_t>(a.positional[2]);
  throw UserError("the data file holds tokens (/train/tokens) but model " +
                  (m.spec.empty() ? "preset " + m.preset : std::string("spec")) +
                  " is not a language model (no embed(vocab, width, context) layer): use --model.preset "
                  "gpt-tiny, gpt-small or gpt2-124m, or set --model.context");
}

bool is_gpt_preset(const ModelConfig& m) { return m.spec.empty() && m.preset.rfind("gpt", 0) == 0; }

}  // namespace

Trainer::Trainer(const Config& cfg, dist::Context& ctx)
    : cfg_(cfg),
      ctx_(ctx),
      comm_(ctx.host_comm()),
      deadline_(cfg.train.time_limit, std::getenv("SLURM_JOB_END_TIME"), Clock::now(),
                static_cast<double>(std::time(nullptr))),
      hooks_(TestHooks::from_env(ctx.world())) {
  device_ = choose_device(cfg.train.device, ctx);
  ctx.check_backend(device_);  // dist.backend must suit the device: nccl on a CPU run is a one-line error
  // Gradients (and everything else that lives on the device: parameters, optimizer state,
  // SyncBatchNorm statistics) go through NCCL on GPUs, MPI on CPUs; host scalars always through comm_.
  // With several GPU ranks this builds the NCCL communicator (and refuses two ranks on one GPU).
  grad_comm_ = &ctx.grad_comm(device_);
  precision_ = std::make_unique<MixedPrecision>(cfg.train.precision, device_);
  blas_threads_ = backend::cpu::configure_threads(ctx.info().local_size);
  const std::string val_file = cfg.data.val_path.empty() ? cfg.data.path : cfg.data.val_path;
  const data::OpenOptions open{cfg.data.check == "full", true};
  if (data::TokenDataset::is_token_file(cfg.data.path)) {
    // A language model: windows of model.context tokens; everything after this works per window.
    context_ = lm_context(cfg.model);
    train_ = std::make_unique<data::TokenDataset>(cfg.data.path, "train", context_, open);
    if (data::H5Dataset::has_split(val_file, "val"))
      val_ = std::make_unique<data::TokenDataset>(val_file, "val", context_, open);
  } else {
    if (is_gpt_preset(cfg.model))
      throw UserError(
          "model.preset " + cfg.model.preset + " is a language model, but data file '" + cfg.data.path +
          "' holds no /train/tokens: make one with `hpcdata pack --from text FILE... -o text.h5`");
    train_ = std::make_unique<data::H5Dataset>(cfg.data.path, "train", open);
    if (data::H5Dataset::has_split(val_file, "val"))
      val_ = std::make_unique<data::H5Dataset>(val_file, "val", open);
  }
  const data::SplitInfo& info = train_->info();
  if (val_) {
    if (val_->info().classification && val_->info().num_classes > info.num_classes)
      throw UserError(val_file + ": /val/y has " + std::to_string(val_->info().num_classes) +
                      " classes but /train/y has " + std::to_string(info.num_classes));
    if (val_->info().sample_shape != info.sample_shape)
      throw UserError(val_file + ": /val/x samples are " + val_->info().sample_shape.str() +
                      " but /train/x are " + info.sample_shape.str());
  }

  micro_batch_ = cfg.train.batch_size;
  global_batch_ = micro_batch_ * ctx.world() * cfg.train.accum_steps;
  sampler_ = std::make_unique<data::DistributedSampler>(
      info.size, micro_batch_ * cfg.train.accum_steps, ctx.world(), ctx.rank(), cfg.train.seed, true,
      // drop_last = false pads the last global batch with masked rows: no sample is seen twice in an epoch.
      cfg.data.drop_last ? data::PadMode::Drop : data::PadMode::Mask,
      "data file '" + cfg.data.path + "': /train");
  steps_per_epoch_ = sampler_->batches_per_epoch();
  total_steps_ = cfg.train.steps > 0 ? cfg.train.steps : cfg.train.epochs * steps_per_epoch_;

  const int64_t outputs = info.classification ? info.num_classes : info.target_shape.count();
  std::string spec = cfg.model.spec.empty() ? nn::preset_spec(cfg.model, outputs) : cfg.model.spec;
  model_ = std::make_unique<nn::Model>(spec, info.sample_shape, precision_->model_dtype(), cfg.train.seed,
                                       device_);
  precision_->attach(model_->params(), model_->grads());
  if (context_ > 0) {
    const Shape& out = model_->output_shape();
    if (out.rank() != 2 || out[0] != context_ || out[1] < info.num_classes)
      throw UserError("model spec: a language model must give logits [context, vocab] = [" +
                      std::to_string(context_) + ", >= " + std::to_string(info.num_classes) +
                      "] per window, but the last layer gives " + out.str());
  } else if (model_->output_shape().count() != outputs)
    throw UserError("model spec: the last layer gives " + model_->output_shape().str() +
                    " outputs but the data has " + std::to_string(outputs) +
                    (info.classification ? " classes" : " targets") + ": end the spec with linear(" +
                    std::to_string(outputs) + ")");

  std::string loss = cfg.train.loss == "auto" ? (info.classification ? "ce" : "mse") : cfg.train.loss;
  if (loss == "ce" && !info.classification)
    throw UserError("--train.loss ce needs integer class labels, but /train/y holds float targets");
  if (loss == "mse" && info.classification)
    throw UserError("--train.loss mse needs float targets, but /train/y holds class labels");
  loss_ = loss == "ce" ? nn::make_cross_entropy(cfg.train.label_smoothing) : nn::make_mse();

  peak_lr_ = optim::scaled_lr(cfg.optim, global_batch_, &lr_note_);
  // The optimizer steps the fp32 master weights of a 16-bit model (the model's own buffer otherwise).
  optimizer_ = optim::Optimizer::create(cfg.optim, precision_->optimizer_params(),
                                        optim::decay_ranges_of(model_->param_info()));
  schedule_ = std::make_unique<optim::LrSchedule>(cfg.optim, peak_lr_, total_steps_);
  sync_bn_ = cfg.model.sync_bn == "true" || (cfg.model.sync_bn == "auto" && ctx.world() > 1);

  if (ctx.world() > 1) {
    // Every rank starts from rank 0's parameters and buffers, and must have built the same model.
    comm_for(model_->params()).broadcast(model_->params(), 0);
    for (auto& [name, t] : model_->buffers()) comm_for(t).broadcast(t, 0);
    precision_->attach(model_->params(), model_->grads());  // 16-bit: master weights from rank 0's
    double mine[2] = {static_cast<double>(model_->num_params()),
                      static_cast<double>(std::hash<std::string>{}(model_->spec()) % (1ull << 52))};
    Tensor check = Tensor::borrow(mine, Shape{2}, DType::F64);
    Tensor all(Shape{2 * ctx.world()}, DType::F64);
    comm_.allgather(check, all);
    for (int r = 0; r < ctx.world(); ++r)
      if (all.data<double>()[2 * r] != mine[0] || all.data<double>()[2 * r + 1] != mine[1])
        throw UserError("rank " + std::to_string(r) + " built a different model than rank " +
                        std::to_string(ctx.rank()) +
                        " (parameter count or spec differ): check that all ranks get "
                        "the same configuration and data file");
    std::vector<int64_t> cuts;  // buckets end at parameter boundaries: a tensor is never split
    for (const nn::ParamInfo& p : model_->param_info()) cuts.push_back(p.offset);
    reducer_ = std::make_unique<dist::GradReducer>(*grad_comm_, model_->grads(),
                                                   cfg.dist.bucket_mb * 1048576.0, cuts, cfg.dist.overlap);
  }

  dlogits_ = Tensor(model_->output_shape().with_batch(micro_batch_), precision_->model_dtype(), device_);
  // A language model's token ids stay float32 on the GPU: a 16-bit x would round ids >= 256 (bf16).
  const DType x_dtype = context_ > 0 && device_ == Device::CUDA ? DType::F32 : precision_->model_dtype();
  upload_ = std::make_unique<BatchUpload>(device_, precision_->model_dtype(), x_dtype);
  const data::LoaderOptions loader_options{cfg.data.workers, cfg.data.prefetch,
                                           BatchUpload::host_allocator(device_)};
  train_loader_ = std::make_unique<data::Loader>(*train_, micro_batch_, loader_options);
  if (val_) val_loader_ = std::make_unique<data::Loader>(*val_, micro_batch_, loader_options);

  if (ctx.is_root()) {
    std::filesystem::create_directories(cfg.run_dir);
    std::ofstream(cfg.run_dir + "/config.ini") << to_ini(cfg);
    metrics_ = MetricsLog(cfg.run_dir + "/metrics.jsonl");
  }
  progress_ = std::make_unique<Progress>(cfg.log.progress, total_steps_, step_, ctx.is_root(), ctx.world());
  // Until the first save is timed: parameters twice (flat and per tensor) and
  // the optimizer state at a modest 200 MB/s, plus a quarter second for fsync.
  const double state_bytes =
      4.0 * static_cast<double>(model_->num_params()) * (2 + optimizer_->state().size());
  deadline_.set_save_seconds(0.25 + state_bytes / 200e6);
}

Trainer::~Trainer() = default;

void Trainer::print_header() {
  const dist::RankInfo& ri = ctx_.info();
  char device[160];
  if (device_ == Device::CUDA) {
    const backend::DeviceInfo d = backend::cuda_device_info(ri.local_rank % backend::cuda_device_count());
    std::snprintf(device, sizeof device, "cuda:%d %s (%s, %.0f GiB)", d.index, d.name.c_str(),
                  d.pci_bus_id.c_str(), double(d.total_bytes) / double(1 << 30));
  } else {
    std::snprintf(device, sizeof device, "cpu (%d BLAS threads)", blas_threads_);
  }
  char mine[320];
  std::snprintf(mine, sizeof mine, "  rank %3d  host %-20s pid %-8d local rank %d/%d  node %d  device %s",
                ri.rank, ri.host.c_str(), ri.pid, ri.local_rank, ri.local_size, ri.node, device);
  std::vector<std::string> lines = ctx_.gather_lines(mine);
  if (!ctx_.is_root()) return;
  std::printf("%s\n", version_report().c_str());
  std::string comms = "none (1 rank)";
  if (ri.world > 1)
    comms = grad_comm_ == &comm_ ? comm_.name()
                                 : grad_comm_->name() + " (gradients), " + comm_.name() + " (host)";
  std::printf("ranks: %d on %d node(s), communicator %s\n", ri.world, ri.num_nodes, comms.c_str());
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  std::printf("configuration:\n%s", to_ini(cfg_).c_str());
  const data::SplitInfo& info = train_->info();
  if (const auto* tokens = dynamic_cast<const data::TokenDataset*>(train_.get())) {
    std::printf("data: %s: %lld train tokens (%s) = %lld windows of %lld + 1, vocabulary %lld%s",
                cfg_.data.path.c_str(), static_cast<long long>(tokens->num_tokens()),
                dtype_name(tokens->token_dtype()), static_cast<long long>(info.size),
                static_cast<long long>(context_), static_cast<long long>(tokens->vocab()),
                tokens->tokenizer().empty() ? "" : (" (" + tokens->tokenizer() + " tokenizer)").c_str());
    if (val_) std::printf(", %lld validation windows", static_cast<long long>(val_->info().size));
  } else {
    std::printf("data: %s: %lld train samples of %s (%s)%s", cfg_.data.path.c_str(),
                static_cast<long long>(info.size), info.sample_shape.str().c_str(), dtype_name(info.x_dtype),
                info.classification ? (", " + std::to_string(info.num_classes) + " classes").c_str() : "");
    if (val_) std::printf(", %lld validation samples", static_cast<long long>(val_->info().size));
  }
  std::printf("\nloader: %d worker thread(s), %d batches ahead, %s host buffers, %s", cfg_.data.workers,
              cfg_.data.prefetch, train_loader_->allocator_name(),
              train_->mapped() ? "data memory-mapped" : "data read with H5Dread");
  const std::string advice = data::mmap_advice({train_.get(), val_.get()});
  if (!advice.empty()) std::printf("\n%s", advice.c_str());
  std::printf("\nmodel: %s\n%s", model_->spec().c_str(), model_->summary().c_str());
  const nn::ActivationBytes act = model_->activation_bytes(micro_batch_);
  std::printf("activations: %.1f MiB per rank at batch %lld", double(act.kept) / 1048576.0,
              static_cast<long long>(micro_batch_));
  if (act.without_recompute > act.with_recompute)
    std::printf(act.kept < act.without_recompute ? " (recompute saves %.1f MiB)"
                                                 : " (--model.recompute true would save %.1f MiB)",
                double(act.without_recompute - act.with_recompute) / 1048576.0);
  std::printf("\n");
  std::printf(
      "batch: %lld per rank × %d ranks × %lld accumulation = %lld global; %lld steps/epoch, %lld steps\n",
      static_cast<long long>(micro_batch_), ri.world, static_cast<long long>(cfg_.train.accum_steps),
      static_cast<long long>(global_batch_), static_cast<long long>(steps_per_epoch_),
      static_cast<long long>(total_steps_));
  if (!lr_note_.empty()) std::printf("%s\n", lr_note_.c_str());
  if (precision_->sixteen_bit())
    std::printf(
        "precision: %s activations, parameters and gradients; fp32 master weights and optimizer state%s\n",
        precision_->name().c_str(), precision_->loss_scale() != 1.0 ? "; dynamic loss scaling" : "");
  if (sync_bn_) std::printf("SyncBatchNorm: on (batch statistics over all %d ranks)\n", ri.world);
  if (reducer_)
    std::printf("gradient all-reduce: %d bucket(s) of ~%.3g MiB, %s, dist.timeout %g s\n",
                reducer_->num_buckets(), cfg_.dist.bucket_mb,
                cfg_.dist.overlap ? "overlapped with backward" : "after backward (no overlap)",
                cfg_.dist.timeout);
  std::fflush(stdout);
  print_checkpoint_policy();
}

void Trainer::start_train_loader() {
  // Item = one micro-batch: step s, micro-step m is item s·accum + m, and
  // takes rows [m·b, (m+1)·b) of the rank's part of global batch s.
  const int64_t accum = cfg_.train.accum_steps;
  train_loader_->start(step_ * accum, total_steps_ * accum, [this, accum](int64_t item, int64_t* out) {
    const int64_t step = item / accum;
    return sampler_->indices(step / steps_per_epoch_, step % steps_per_epoch_, (item % accum) * micro_batch_,
                             micro_batch_, out);
  });
}

void Trainer::train_step(int64_t epoch, int64_t batch, StepTimes& t) {
  ctx_.on_step(step_ + 1);  // hang reports name the step; test-only fault injection
  const int64_t accum = cfg_.train.accum_steps;
  if (train_loader_->position() != step_ * accum || train_loader_->end() != total_steps_ * accum)
    start_train_loader();
  // Real samples of this global batch per rank: the global batch, except a drop_last = false tail.
  const double normalizer = static_cast<double>(sampler_->global_valid(batch)) / ctx_.world();
  model_->zero_grads();
  nn::RunCtx rc;
  rc.training = true;
  rc.seed = cfg_.train.seed;
  rc.comm = sync_bn_ ? grad_comm_ : nullptr;  // the statistics live where the activations do
  rc.rank = ctx_.rank();
  for (int64_t micro = 0; micro < accum; ++micro) {
    auto t0 = Clock::now();
    const data::Batch& b = train_loader_->next();  // the wait is the data time the loader did not hide
    auto t1 = Clock::now();
    t.data += std::chrono::duration<double>(t1 - t0).count();
    rc.step = static_cast<uint64_t>(step_ * accum + micro);
    const auto [x, y] = (*upload_)(b);
    const Tensor& logits = model_->forward(x, rc);
    // fp16: the loss gradient is scaled by S (MixedPrecision::unscale divides it out again).
    nn::LossStats s =
        loss_->forward_backward(logits, y, b.valid, normalizer / precision_->loss_scale(), dlogits_);
    win_loss_ += s.loss_sum;
    win_count_ += static_cast<double>(s.count);
    win_correct_ += static_cast<double>(s.correct1);
    // Gradient accumulation: only the last micro-step communicates (like DDP's no_sync).
    const bool last = micro + 1 == accum;
    if (reducer_ && last) {
      reducer_->begin();
      model_->backward(dlogits_, rc, [this](int64_t frontier) {
        dist::fault_at(dist::FaultPoint::Backward);  // test-only: a signal mid-backward, buckets in flight
        reducer_->on_ready(frontier);
      });
    } else {
      dist::fault_at(dist::FaultPoint::Backward);
      model_->backward(dlogits_, rc);
    }
    t.compute += seconds_since(t1);
  }
  // The wait in finish() is the communication backward did not hide.
  if (reducer_) t.comm += reducer_->finish();
  auto t2 = Clock::now();
  if (!precision_->unscale()) {  // fp16 gradients overflowed: skip the step (the loss scale was lowered)
    if (precision_->consecutive_skips() >= MAX_CONSECUTIVE_SKIPS)
      throw UserError("training diverged: " + std::to_string(MAX_CONSECUTIVE_SKIPS) +
                      " consecutive fp16 steps had inf/NaN gradients (loss scale now " +
                      std::to_string(precision_->loss_scale()) +
                      "): lower --optim.lr or use --train.precision bf16");
    t.compute += seconds_since(t2);
    ++step_;
    return;
  }
  last_grad_norm_ = optim::clip_grad_norm(precision_->optimizer_grads(), cfg_.optim.clip_norm);
  if (!std::isfinite(last_grad_norm_))
    throw UserError("training diverged: the gradient norm is not finite at step " +
                    std::to_string(step_ + 1) +
                    ": lower --optim.lr, add --optim.warmup_steps or set --optim.clip_norm");
  last_lr_ = schedule_->lr_at(step_);
  optimizer_->step(precision_->optimizer_params(), precision_->optimizer_grads(), last_lr_);
  precision_->publish();
  t.compute += seconds_since(t2);
  ++step_;
}

std::string Trainer::device_report() const {
  const backend::DeviceMemoryStats m = backend::device_memory_stats();
  char line[200];
  std::snprintf(line, sizeof line, "      device memory: peak %.1f MiB of %.1f GiB",
                double(m.peak) / 1048576.0, double(m.total) / double(1 << 30));
  std::string out = line;
  if (precision_->loss_scale() != 1.0 || precision_->skipped_steps() > 0) {
    std::snprintf(line, sizeof line, "; fp16 steps skipped: %lld, loss scale %g",
                  static_cast<long long>(precision_->skipped_steps()), precision_->loss_scale());
    out += line;
  }
  return out;
}

void Trainer::log_step(int64_t epoch, const StepTimes& t, double window_s) {
  // Loss and accuracy over the window, summed over ranks (one small allreduce).
  double sums[3] = {win_loss_, win_count_, win_correct_};
  Tensor s = Tensor::borrow(sums, Shape{3}, DType::F64);
  comm_.allreduce(s, dist::ReduceOp::Sum);
  const double loss = sums[0] / std::max(1.0, sums[1]);
  const double steps = static_cast<double>(std::max<int64_t>(1, win_steps_));
  // The loss counts tokens for a language model: samples are windows of context_ tokens.
  const double per_sample = context_ > 0 ? static_cast<double>(context_) : 1.0;
  const double sps = sums[1] / per_sample / std::max(1e-9, window_s);
  progress_->step_line(epoch, step_, loss, last_lr_, last_grad_norm_, sps * per_sample, 1e3 * t.data / steps,
                       1e3 * t.compute / steps, 1e3 * t.comm / steps);
  Record r;
  r.add_int("step", step_)
      .add_int("epoch", epoch)
      .add("loss", loss)
      .add("lr", last_lr_)
      .add("grad_norm", last_grad_norm_)
      .add("samples_per_s", sps)
      .add("data_ms", 1e3 * t.data / steps)
      .add("compute_ms", 1e3 * t.compute / steps)
      .add("comm_ms", 1e3 * t.comm / steps)
      .add("train_acc", sums[2] / std::max(1.0, sums[1]));
  if (context_ > 0) r.add("tokens_per_s", sps * per_sample);
  if (precision_->sixteen_bit())
    r.add("loss_scale", precision_->loss_scale()).add_int("skipped_steps", precision_->skipped_steps());
  if (device_ == Device::CUDA) r.add("device_mem_peak_mb", backend::device_memory_stats().peak / 1048576.0);
  metrics_.write(r);
}

EvalResult Trainer::evaluate() {
  EvalResult res;
  if (!val_) return res;
  // The plan owns the sampler: the loader's threads may outlive an exception thrown here.
  auto sampler = std::make_shared<data::DistributedSampler>(val_->info().size, micro_batch_, ctx_.world(),
                                                            ctx_.rank(), 0, false, data::PadMode::Mask);
  val_loader_->start(0, sampler->batches_per_epoch(),
                     [sampler](int64_t b, int64_t* out) { return sampler->indices(0, b, out); });
  nn::RunCtx rc;
  rc.training = false;
  rc.seed = cfg_.train.seed;
  double sums[4] = {0, 0, 0, 0};  // loss, count, correct1, correct5
  for (int64_t b = 0; b < sampler->batches_per_epoch(); ++b) {
    const data::Batch& batch = val_loader_->next();
    const auto [x, y] = (*upload_)(batch);
    const Tensor& logits = model_->forward(x, rc);
    nn::LossStats s = loss_->forward_backward(logits, y, batch.valid, 1.0, Tensor());
    sums[0] += s.loss_sum;
    sums[1] += static_cast<double>(s.count);
    sums[2] += static_cast<double>(s.correct1);
    sums[3] += static_cast<double>(s.correct5);
  }
  val_loader_->stop();  // joins the (finished) workers
  comm_.allreduce(Tensor::borrow(sums, Shape{4}, DType::F64), dist::ReduceOp::Sum);
  res.count = static_cast<int64_t>(sums[1]);
  res.per_token = context_ > 0;
  res.loss = sums[0] / std::max(1.0, sums[1]);
  res.acc = sums[2] / std::max(1.0, sums[1]);
  if (val_->info().classification && val_->info().num_classes >= 10)
    res.top5 = sums[3] / std::max(1.0, sums[1]);
  return res;
}

EvalResult Trainer::run() {
  progress_->table_header(context_ > 0 ? "tokens/s" : "samples/s");
  last_boundary_ = last_ckpt_time_ = Clock::now();  // step and checkpoint timing start here, after set-up
  EvalResult last;
  auto window_start = Clock::now();
  while (step_ < total_steps_) {
    const int64_t epoch = step_ / steps_per_epoch_;
    StepTimes t;
    train_step(epoch, step_ % steps_per_epoch_, t);
    win_times_.data += t.data;
    win_times_.compute += t.compute;
    win_times_.comm += t.comm;
    ++win_steps_;
    progress_->tick(step_);
    const bool epoch_end = step_ % steps_per_epoch_ == 0 || step_ == total_steps_;
    if (step_ % cfg_.log.every == 0 || epoch_end) {
      log_step(epoch, win_times_, seconds_since(window_start));
      win_loss_ = win_count_ = win_correct_ = 0;
      win_steps_ = 0;
      win_times_ = StepTimes();
      window_start = Clock::now();
    }
    if (epoch_end && val_) {
      last = evaluate();
      if (last.per_token) {
        char line[200];
        std::snprintf(line, sizeof line,
                      "eval  epoch %lld step %lld: val_loss %.4f per token  val_acc %.2f%%  perplexity %.3f",
                      static_cast<long long>(epoch), static_cast<long long>(step_), last.loss, 100 * last.acc,
                      std::exp(last.loss));
        progress_->line(line);
      } else {
        progress_->eval_line(epoch, step_, last.loss, last.acc, last.top5);
      }
      if (device_ == Device::CUDA) progress_->line(device_report());
      Record r;
      r.add_int("step", step_).add_int("epoch", epoch).add("val_loss", last.loss).add("val_acc", last.acc);
      if (last.top5 >= 0) r.add("val_top5", last.top5);
      if (last.per_token) r.add("val_ppl", std::exp(last.loss));
      metrics_.write(r);
      window_start = Clock::now();  // evaluation time is not training throughput
    }
    if (checkpoint_or_stop()) break;
  }
  if (exit_code_ == EXIT_OK) {
    // Resumed from a finished run: nothing to train, but the final evaluation is still the answer.
    if (val_ && last.count == 0) last = evaluate();
    if (step_ != last_ckpt_step_ && !save_checkpoint("end of training") && exit_code_ == EXIT_OK)
      exit_code_ = EXIT_BAD_INPUT;  // (a full disk has set EXIT_IO)
  }
  progress_->done();
  return last;
}

}  // namespace hpc::train
