// Trainer set-up: the constructor and its named steps, in the order their
// inputs need (see trainer.h). Every rank runs every step; the collectives
// here (the device vote, the NCCL set-up, the parameter broadcast and the
// model check) are called in the same order everywhere. A set-up error is a
// UserError that main.cpp agrees on across ranks before training starts.
#include <chrono>
#include <cstdlib>
#include <ctime>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/threads.h"
#include "backend/device.h"
#include "core/error.h"
#include "core/mem_ledger.h"
#include "data/augment.h"
#include "data/train_loader.h"
#include "dist/devices.h"
#include "dist/shards.h"
#include "train/device_choice.h"
#include "train/model_init.h"
#include "train/trainer.h"

namespace hpc::train {

namespace {

using Clock = std::chrono::steady_clock;

// UserError unless every rank built the same model as this one: the parameter
// count and a hash of the canonical spec, gathered from every rank.
void check_same_model(dist::Communicator& comm, const nn::Model& model) {
  ModelFingerprint mine;
  mine.params = model.num_params();
  mine.spec_hash = static_cast<int64_t>(std::hash<std::string>{}(model.spec()) % (1ull << 52));
  const std::vector<ModelFingerprint> all = gather_from_ranks(comm, mine);
  for (int r = 0; r < comm.size(); ++r)
    if (all[size_t(r)].params != mine.params || all[size_t(r)].spec_hash != mine.spec_hash)
      throw UserError("rank " + std::to_string(r) + " built a different model than rank " +
                      std::to_string(comm.rank()) +
                      " (parameter count or spec differ): check that all ranks get "
                      "the same configuration and data file");
}

}  // namespace

// The compute device (train.device resolved by train/device_choice.h from
// this rank's view and, with several ranks, whether every rank sees a GPU:
// one Max allreduce over the host communicator). On the GPU, the device is
// local rank mod the visible ones, made current here.
Device resolve_rank_device(DeviceChoice want, dist::Context& ctx) {
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

Trainer::Trainer(const Config& cfg, dist::Context& ctx, dist::Grid& grid)
    : cfg_(cfg),
      ctx_(ctx),
      grid_(grid),
      comm_(ctx.host_comm()),
      dp_comm_(grid.host(dist::GroupKind::Dp)),
      policy_({}, Deadline(cfg.train.time_limit, std::getenv("SLURM_JOB_END_TIME"), Clock::now(),
                           static_cast<double>(std::time(nullptr)))) {
  choose_device();
  open_data();
  build_model();
  sync_replicas();
  build_optimizer();
  build_reducer();
  start_loaders();
  open_run_dir();
}

Trainer::~Trainer() = default;

void Trainer::choose_device() {
  device_ = resolve_rank_device(cfg_.train.device, ctx_);
  ctx_.check_backend(device_);  // dist.backend must suit the device: nccl on a CPU run is a one-line error
  // Gradients (and everything else that lives on the device: parameters, optimizer state,
  // SyncBatchNorm statistics) go through NCCL on GPUs, MPI on CPUs; host scalars always through comm_.
  // With several GPU ranks this builds the NCCL communicators, the world's and its groups' (and
  // refuses two ranks on one GPU).
  grid_.use_device(device_);
  grad_comm_ = &grid_.comm(dist::GroupKind::Dp, device_);
  blas_threads_ = backend::cpu::configure_threads(ctx_.info().local_size);
}

void Trainer::open_data() {
  data_ = open_run_data(cfg_);
  // train.batch_size is one data-parallel replica's: the ranks of a tensor-parallel group and the
  // stages of a pipeline share it. It is cut into train.micro_batches micro-batches (config.cpp
  // checked that they divide it), each accumulated train.accum_steps times.
  micro_batch_ = cfg_.train.batch_size / cfg_.train.micro_batches;
  accum_ = cfg_.train.accum_steps * cfg_.train.micro_batches;
  global_batch_ = cfg_.train.batch_size * grid_.dp() * cfg_.train.accum_steps;
  sampler_ = std::make_unique<data::DistributedSampler>(
      data_.train->info().size, micro_batch_ * accum_, grid_.dp(), grid_.dp_rank(), cfg_.train.seed, true,
      // drop_last = false pads the last global batch with masked rows: no sample is seen twice in an epoch.
      cfg_.data.drop_last ? data::PadMode::Drop : data::PadMode::Mask,
      "data file '" + cfg_.data.path + "': /train");
  steps_per_epoch_ = sampler_->batches_per_epoch();
  total_steps_ = cfg_.train.steps > 0 ? cfg_.train.steps : cfg_.train.epochs * steps_per_epoch_;
  CheckpointPolicy::Rules rules;
  rules.every_steps = cfg_.ckpt.every_steps;
  rules.every_minutes = cfg_.ckpt.every_minutes;
  rules.total_steps = total_steps_;
  rules.steps_per_epoch = steps_per_epoch_;
  rules.evaluates = data_.val != nullptr;
  policy_.set_rules(rules);
}

void Trainer::build_model() {
  const data::SplitInfo& info = data_.train->info();
  const Task& task = data_.task;
  // Tensor parallelism: each rank builds its part of the split layers (nn/tensor_parallel.h).
  const nn::TpSplit split{grid_.tp(), grid_.tp_rank(), cfg_.dist.sequence_parallel};
  if (split.active()) check_tensor_parallel();
  const DType dtype = MixedPrecision::model_dtype(cfg_.train.precision, device_);
  if (grid_.pp() > 1)  // this stage's piece of the model (trainer_pipeline.cpp)
    build_pipeline(task.model_layers(cfg_.model, info), dtype);
  else
    model_ = std::make_unique<nn::Model>(task.model_layers(cfg_.model, info), info.sample_shape, dtype,
                                         cfg_.train.seed, device_, stored_range(), split);
  const nn::VocabSplit vocab = whole_model().output_vocab();  // a pipeline's last stage holds the head
  // A split lm_head gives this rank's columns of the (padded) vocabulary: the model's are the real ones.
  const Shape& out = whole_model().output_shape();
  task.check_output(vocab.vocab > 0 ? Shape{out[0], vocab.vocab} : out, info);
  // Fine-tuning: every rank loads (a failure is agreed in main.cpp); a resume then overrides it.
  if (!cfg_.model.init.empty()) init_note_ = init_model(*model_, cfg_.model.init, cfg_.model.init_skip);
  loss_ = task.make_loss(cfg_.train, info);
  if (split.active()) {
    tp_host_ = std::make_unique<CommTp>(grid_.host(dist::GroupKind::Tp));
    tp_device_ = std::make_unique<CommTp>(grid_.comm(dist::GroupKind::Tp, device_));
    if (vocab.vocab > 0)  // the logits are a shard: the loss reduces its parts over the group
      loss_ = nn::make_vocab_parallel_cross_entropy(cfg_.train.label_smoothing, *tp_device_, vocab);
  }
  // Over the replicas (the data-parallel group): the ranks of a tensor-parallel group share a batch.
  const bool sync_bn =
      cfg_.model.sync_bn == SyncBn::On || (cfg_.model.sync_bn == SyncBn::Auto && grid_.dp() > 1);
  // The statistics live where the activations do: the gradient communicator reaches them.
  if (sync_bn) sum_over_replicas_ = dist::replica_sum(*grad_comm_);
}

void Trainer::check_tensor_parallel() const {
  if (cfg_.dist.zero == 3)
    throw UserError("dist.zero 3 cannot be combined with dist.tp " + std::to_string(grid_.tp()) +
                    " yet: stage 3's units shard the unsplit layout (use --dist.zero 1 or 2 with tensor "
                    "parallelism)");
}

void Trainer::sync_replicas() {
  if (ctx_.world() == 1) return;
  // A shard (dist.zero 3) was drawn by each rank itself: initial values are a pure function of the seed.
  if (model_->stores_whole_params()) comm_for(model_->params()).broadcast(model_->params(), 0);
  for (auto& [name, t] : model_->buffers()) comm_for(t).broadcast(t, 0);
  if (stage_) check_same_model(comm_, *whole_);  // every stage cut the same model
  check_same_model(stage_ ? dp_comm_ : comm_, *model_);
}

void Trainer::build_optimizer() {
  // After sync_replicas: a 16-bit run's fp32 master weights are copies of rank 0's parameters.
  // dist.zero: master weights, fp32 gradients and optimizer state for this rank's shard only, sharded
  // over the data-parallel group (the replicas of the same parameters).
  sharding_ =
      std::make_unique<Sharding>(cfg_.dist.zero, grid_.dp_rank(), grid_.dp(), model_->num_params(), device_);
  // The shard's range of what the model stores (all of it, or with dist.zero 3 exactly the shard).
  const Shape shard{sharding_->count()};
  precision_ = std::make_unique<MixedPrecision>(
      cfg_.train.precision, device_, model_->params().slice(sharding_->lo() - model_->params_lo(), shard),
      model_->grads().slice(sharding_->lo() - model_->grads_lo(), shard));
  if (sharding_->active() || stage_)  // a pipeline's stages hold different gradients: they agree too
    precision_->set_count_over_ranks([this](double n) {  // every rank of the grid skips a step, or none
      comm_.allreduce(Tensor::borrow(&n, Shape{1}, DType::F64), dist::ReduceOp::Max);
      return n;
    });
  const double peak_lr = optim::scaled_lr(cfg_.optim, global_batch_, &lr_note_);
  // The optimizer steps the fp32 master weights of a 16-bit model (the model's own buffer otherwise).
  const MemUseScope use(MemUse::OptimizerState);
  optimizer_ = optim::Optimizer::create(
      cfg_.optim, precision_->optimizer_params(),
      optim::decay_ranges_in(optim::decay_ranges_of(model_->param_info()), sharding_->lo(), sharding_->hi()));
  schedule_ = std::make_unique<optim::LrSchedule>(cfg_.optim, peak_lr, total_steps_);
}

void Trainer::build_reducer() {
  if (grid_.dp() == 1) return;                                       // one replica: no gradient to average
  if (!model_->stores_whole_grads()) return build_sharded_params();  // ZeRO 3, or 2 on a GPU
  std::vector<int64_t> cuts;  // buckets end at parameter boundaries: a tensor is never split
  for (const nn::ParamInfo& p : model_->param_info()) cuts.push_back(p.offset);
  // ZeRO 1 reduce-scatters the buckets after backward, ZeRO 2 as backward completes them (dist.overlap).
  // A pipeline stage holding half of a tied pair sums it with the other half before the reduction.
  const bool overlap = sharding_->stage() == 1 || !tied_.empty() ? false : cfg_.dist.overlap;
  reducer_ = std::make_unique<dist::GradReducer>(
      *grad_comm_, model_->grads(), cfg_.dist.bucket_mb * 1048576.0, cuts, overlap,
      sharding_->active() ? sharding_->bounds() : std::vector<int64_t>{});
  if (sharding_->keeps_own_grads_only()) {  // ZeRO 2 on the CPU: the shard of the gradients only
    reducer_->release_reduced();
    sharding_->zero_grads(model_->grads());  // hands back the rest of the freshly zeroed buffer now
  }
}

void Trainer::start_loaders() {
  dlogits_ = Tensor(model_->output_shape().with_batch(micro_batch_), model_->dtype(), device_);
  upload_ = std::make_unique<BatchUpload>(device_, model_->dtype(), model_->input_dtype());
  const data::LoaderOptions options{cfg_.data.workers, cfg_.data.prefetch,
                                    BatchUpload::host_allocator(device_)};
  const data::Augment augment = data::parse_augment(cfg_.data.augment);
  const int64_t accum = accum_;
  train_loader_ = data::make_train_loader(
      *data_.train, micro_batch_, options, augment, cfg_.train.seed,
      [this, accum](int64_t item) { return item / accum / steps_per_epoch_; },
      "data file '" + cfg_.data.path + "': /train");
  // Decoded images: what the loader can deliver against a step's batch, for the start-up report.
  loader_note_ = data::loader_capacity_line(data::measure_loader(*data_.train, augment, cfg_.train.seed),
                                            cfg_.data.workers, micro_batch_ * accum);
  if (data_.val) val_loader_ = std::make_unique<data::Loader>(*data_.val, micro_batch_, options);
}

void Trainer::open_run_dir() {
  if (ctx_.is_root()) {
    std::filesystem::create_directories(cfg_.run_dir);
    std::ofstream(cfg_.run_dir + "/config.ini") << to_ini(cfg_);
    metrics_ = MetricsLog(cfg_.run_dir + "/metrics.jsonl");
  }
  // Every rank takes part in a save: rank 0 writes, the others send their shards (ckpt/shard_stream.h).
  // The other ranks' writer threads use MPI (their channel) while training does: without
  // MPI_THREAD_MULTIPLE (the same on every rank) saves stay synchronous.
  if (cfg_.ckpt.async && (ctx_.world() == 1 || ctx_.thread_multiple()))
    writer_ = std::make_unique<ckpt::AsyncWriter>();
  // (A split model's state is put together into the unsplit model instead: train/tp_state.h.)
  if (ctx_.world() > 1 && grid_.tp() == 1 && grid_.pp() == 1)
    channel_ = std::make_shared<ckpt::ShardChannel>(MPI_COMM_WORLD, cfg_.dist.timeout);
  progress_ =
      std::make_unique<Progress>(cfg_.log.progress, total_steps_, step_, ctx_.is_root(), ctx_.world());
  tracer_ = std::make_unique<Tracer>(cfg_.log.trace, cfg_.log.trace_steps, ctx_.rank());
  // Where this rank's collective flight record goes when a collective times out or on SIGUSR2.
  ctx_.heartbeat().flight().set_path(cfg_.run_dir + "/flight-" + std::to_string(ctx_.rank()) + ".json",
                                     ctx_.rank(), ctx_.info().host);
  dist::install_fatal_signal_dump(ctx_.heartbeat().flight());  // and when this process crashes
  // Until the first save is timed: parameters twice (flat and per tensor) and
  // the optimizer state at a modest 200 MB/s, plus a quarter second for fsync.
  const double state_bytes =
      4.0 * static_cast<double>(model_->num_params()) * (2 + optimizer_->state().size());
  policy_.deadline().set_save_seconds(0.25 + state_bytes / 200e6);
}

}  // namespace hpc::train
