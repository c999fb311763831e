// Batch normalisation (Ioffe & Szegedy 2015) with PyTorch's conventions:
// eps 1e-5, momentum 0.1, biased variance to normalise, unbiased variance in
// the running estimate, batch statistics in training and running ones in eval.
//
// bn(gamma=0) starts the scale at 0 instead of 1: the last bn of a residual
// branch so initialised makes the block the identity at the start (Goyal et
// al. 2017; torchvision's zero_init_residual).
//
// SyncBatchNorm is the same layer with ctx.sum_over_replicas set: the per-channel
// [Σx, Σx², count] are all-reduced before the mean and variance are formed,
// and [Σdy, Σdy·x̂] before dx is formed. Every rank then computes exactly
// what one rank would on the concatenated batch. The gamma/beta gradients
// use the LOCAL sums: the trainer averages parameter gradients over ranks
// afterwards, like every other parameter's.
//
// On GPUs the statistics are device tensors, so the reduction must reach
// device memory: the trainer binds it to its gradient communicator's
// allreduce_before_compute (NCCL on GPUs, MPI on CPUs), which keeps the sums
// stream-ordered on NCCL (the collective runs after the kernels that wrote
// them, the kernels that read them wait for it, the host does not) and is
// the blocking allreduce on MPI. The layer itself knows no communicator.
#include "backend/ops.h"
#include "core/error.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"

namespace hpc::nn {

BatchNorm::BatchNorm(const LayerArgs& args) {
  ArgReader r(args, {"eps", "momentum", "gamma"});
  text_ = r.text();
  eps_ = r.real_or("eps", 1e-5);
  momentum_ = r.real_or("momentum", 0.1);
  const double gamma = r.real_or("gamma", 1.0);
  r.finish();
  if (gamma != 0 && gamma != 1) r.fail("gamma (the initial scale) must be 1 or 0, got " + number_text(gamma));
  zero_gamma_ = gamma == 0;
  if (eps_ <= 0) r.fail("eps must be > 0, got " + number_text(eps_));
  if (momentum_ < 0 || momentum_ > 1) r.fail("momentum must be in [0, 1], got " + number_text(momentum_));
}

std::string BatchNorm::spec() const {
  std::string s;
  if (eps_ != 1e-5) s += "eps=" + number_text(eps_);
  if (momentum_ != 0.1) s += (s.empty() ? "" : ",") + std::string("momentum=") + number_text(momentum_);
  if (zero_gamma_) s += (s.empty() ? "" : ",") + std::string("gamma=0");
  return s.empty() ? "bn" : "bn(" + s + ")";
}

Shape BatchNorm::build(const Shape& in, DType dtype) {
  if (in.rank() < 1 || in.rank() > 3)
    throw_layer_error(text_, "needs an F, CxL or CxHxW input, got " + in.str());
  channels_ = in[0];
  spatial_ = in.count() / channels_;
  image_ = in.rank() == 3;
  // Statistics of 16-bit activations are kept in float32: a running variance
  // nudged by momentum 0.1 would lose most of each update in 8 mantissa bits.
  const DType stat = dtype == DType::F64 ? DType::F64 : DType::F32;
  running_mean_ = Tensor(Shape{channels_}, stat);
  running_var_ = Tensor(Shape{channels_}, stat);
  backend::fill(running_var_, 1.0);
  mean_ = Tensor(Shape{channels_}, stat);
  invstd_ = Tensor(Shape{channels_}, stat);
  stats_ = Tensor(Shape{2 * channels_ + 1}, DType::F64);
  grad_sums_ = Tensor(Shape{2 * channels_}, DType::F64);
  return in;
}

std::vector<ParamSpec> BatchNorm::param_specs() const {
  return {{"gamma", Shape{channels_}, zero_gamma_ ? Init::Zeros : Init::Ones, channels_, channels_, false},
          {"beta", Shape{channels_}, Init::Zeros, channels_, channels_, false}};
}

void BatchNorm::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == 2 && grads.size() == 2, "bn: bind count");
  gamma_ = params[0];
  beta_ = params[1];
  dgamma_ = grads[0];
  dbeta_ = grads[1];
}

std::vector<std::pair<std::string, Tensor>> BatchNorm::buffers() {
  return {{"running_mean", running_mean_}, {"running_var", running_var_}};
}

// The layer's state lives where its input does: built on the host, it moves
// (running statistics copied) the first time it sees a tensor on another
// device. Until then buffers() are host tensors, which is what the start-up
// broadcast and a checkpoint restore before training expect.
void BatchNorm::follow_device(Device device) {
  if (running_mean_.device() == device) return;
  auto moved = [device](const Tensor& t, bool keep_values) {
    Tensor out(t.shape(), t.dtype(), device);
    if (keep_values) backend::copy(t, out);
    return out;
  };
  running_mean_ = moved(running_mean_, true);
  running_var_ = moved(running_var_, true);
  mean_ = moved(mean_, false);
  invstd_ = moved(invstd_, false);
  stats_ = moved(stats_, false);
  grad_sums_ = moved(grad_sums_, false);
}

// Channel-blocked images keep their layout (the ops run blocked loops).
int64_t BatchNorm::output_block(int64_t in, int64_t, bool out_may) const {
  if (in == 0) return 0;
  return out_may && image_ && channels_ % in == 0 ? in : -1;
}

void BatchNorm::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  follow_device(x.device());
  batch_stats_ = ctx.training;
  if (batch_stats_) {
    backend::batchnorm_stats(x, channels_, spatial_, stats_);
    if (ctx.sum_over_replicas) ctx.sum_over_replicas(stats_);
    backend::batchnorm_finalize(stats_, channels_, eps_, momentum_, mean_, invstd_, running_mean_,
                                running_var_);
  } else {
    backend::batchnorm_running_inverse(running_mean_, running_var_, eps_, mean_, invstd_);
  }
  backend::batchnorm_normalize(x, mean_, invstd_, gamma_, beta_, relu_, channels_, spatial_, y);
}

// With a folded relu, dy is the relu's; the ops mask it by the normalised
// value, recomputed from x (the parameters are those forward used).
void BatchNorm::backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& dx,
                         const RunCtx& ctx) {
  backend::batchnorm_backward_reduce(x, dy, mean_, invstd_, gamma_, beta_, relu_, channels_, spatial_,
                                     grad_sums_, dgamma_, dbeta_);
  if (!dx.defined()) return;
  if (!batch_stats_) {
    backend::batchnorm_backward_dx(x, dy, mean_, invstd_, gamma_, beta_, relu_, Tensor(), Tensor(), channels_,
                                   spatial_, dx);
    return;
  }
  if (ctx.sum_over_replicas) ctx.sum_over_replicas(grad_sums_);
  backend::batchnorm_backward_dx(x, dy, mean_, invstd_, gamma_, beta_, relu_, stats_, grad_sums_, channels_,
                                 spatial_, dx);
}

}  // namespace hpc::nn
