// Trainer: pipeline parallelism, dist.pp > 1 (see trainer.h; the stage's
// messages and models in flight are PipelineStage's, pipeline_stage.h).
//
// Each stage builds its piece of the model (nn::LayerRange: the stage
// partition's layers, the whole model's initial values and layout; with
// dist.pp_virtual V its V chunks laid out in one buffer, each run by models
// bound to its part), runs its 1F1B or interleaved action list
// (pipeline_schedule.h) over the step's micro-batches, and steps its own
// parameters. What ties the stages together:
//   - data: every stage of a replica reads the same micro-batches in order
//     (the first uses the inputs, the last the targets, kept until the
//     head's forward when chunks come between); dropout's masks are
//     functions of the micro-batch index and the whole model's layer index,
//     so a stage draws what the unsplit model draws;
//   - loss: the last stage's, normalised by the global batch's real samples
//     (a sum over micro-batches, not a mean of means), logged on rank 0 through
//     one sum over the world to which the other stages add nothing;
//   - tied embedding: the first stage's matrix and the last stage's copy get
//     their gradients summed over the embed group before the data-parallel
//     reduction (those two stages reduce after backward, not overlapped);
//   - gradient norm: every stage's squares (the copy left out) summed over the
//     pp group, so clipping scales every stage by the same factor;
//   - checkpoints: rank 0 puts the stages' pieces together into the whole
//     model (one stage at a time), and a resume takes each piece from it: the
//     file never depends on the grid.
// Per micro-batch the stages compute what the unsplit model computes, bit for
// bit (tests/unit/test_pipeline_model.cpp); the gradient accumulates in the
// same micro-batch order, so pp > 1 equals pp = 1 with train.micro_batches
// bitwise, but for the tied pair (summed once per step rather than per
// micro-batch) and the norm's order of summation (tests/e2e/pp_train.sh).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "train/tp_state.h"
#include "train/trainer.h"

namespace hpc::train {

namespace {

std::string layer_kind(const std::string& spec) { return spec.substr(0, spec.find('(')); }

// Each layer's forward FLOPs, kept activations and parameters for `batch` samples: the partition's costs.
std::vector<LayerCost> layer_costs(const nn::Model& whole, int64_t batch) {
  std::vector<LayerCost> out;
  for (int i = 0; i < whole.num_layers(); ++i) {
    LayerCost c;
    c.name = layer_kind(whole.layer_spec(i));
    c.flops = static_cast<double>(const_cast<nn::Model&>(whole).layer(i).forward_flops()) *
              static_cast<double>(batch);
    c.activation_bytes =
        static_cast<double>(const_cast<nn::Model&>(whole).layer(i).activation_bytes(batch).without_recompute);
    c.parameters = whole.layer_end(i) - whole.layer_begin(i);
    c.is_block = c.name == "block" || c.name == "llama_block";
    out.push_back(std::move(c));
  }
  return out;
}

// A pipeline piece's own parameters (not its tied copies) unsplit, one after the other: how a stage
// sends its state to rank 0 for a checkpoint.
int64_t packed_count(const nn::Model& piece) {
  int64_t n = 0;
  for (const nn::ParamInfo& p : piece.param_info())
    if (!p.tied_copy) n += p.full_shape.count();
  return n;
}

// from: the piece's own flat buffer (unsplit: tp 1), or a tensor in the whole model's layout.
Tensor pack_piece(const nn::Model& piece, const Tensor& from, bool whole_layout) {
  Tensor out(Shape{packed_count(piece)}, DType::F32);
  int64_t at = 0;
  for (const nn::ParamInfo& p : piece.param_info()) {
    if (p.tied_copy) continue;
    const int64_t n = p.full_shape.count();
    backend::copy(from.slice(whole_layout ? p.full_offset : p.offset, Shape{n}), out.slice(at, Shape{n}));
    at += n;
  }
  return out;
}

// whole (the whole model's layout) ← a packed piece.
void unpack_piece(const nn::Model& piece, const Tensor& packed, const Tensor& whole) {
  int64_t at = 0;
  for (const nn::ParamInfo& p : piece.param_info()) {
    if (p.tied_copy) continue;
    const int64_t n = p.full_shape.count();
    backend::copy(packed.slice(at, Shape{n}), whole.slice(p.full_offset, Shape{n}));
    at += n;
  }
}

// A copy of t in slot i of `kept` (grown and reallocated as needed), returned.
const Tensor& keep(std::vector<Tensor>& kept, size_t i, const Tensor& t) {
  if (kept.size() <= i) kept.resize(i + 1);
  Tensor& buf = kept[i];
  if (!buf.defined() || buf.shape() != t.shape() || buf.dtype() != t.dtype() || buf.device() != t.device())
    buf = Tensor(t.shape(), t.dtype(), t.device());
  backend::copy(t, buf);
  return buf;
}

const nn::StoredRange NO_BUFFERS{[](int64_t) { return std::pair<int64_t, int64_t>{0, 0}; }, false};

}  // namespace

void Trainer::check_pipeline() const {
  const std::string pp = "dist.pp " + std::to_string(grid_.pp());
  if (cfg_.dist.zero == 3 || (cfg_.dist.zero == 2 && device_ == Device::CUDA))
    throw UserError(pp + " cannot be combined with dist.zero " + std::to_string(cfg_.dist.zero) +
                    (device_ == Device::CUDA ? " on GPUs" : "") +
                    " yet: a stage's micro-batches in flight share its whole parameter and gradient "
                    "buffers (use --dist.zero 1" +
                    (device_ == Device::CUDA ? "" : " or 2") + ")");
  if (!cfg_.model.init.empty())
    throw UserError(pp +
                    " cannot start from --model.init yet: fine-tune with dist.pp 1, or resume a "
                    "checkpoint (any dist.pp resumes any checkpoint)");
}

void Trainer::build_pipeline(const std::vector<nn::LayerArgs>& layers, DType dtype) {
  check_pipeline();
  const data::SplitInfo& info = data_.train->info();
  const nn::TpSplit split{grid_.tp(), grid_.tp_rank(), cfg_.dist.sequence_parallel};
  const int stages = grid_.pp(), me = grid_.pp_rank(), chunks = cfg_.dist.pp_virtual;
  auto build = [&](const nn::LayerRange& range, const nn::StoredRange& stored) {
    return std::make_unique<nn::Model>(layers, info.sample_shape, dtype, cfg_.train.seed, device_, stored,
                                       split, range);
  };
  // The whole model's layout (no parameters stored): the costs, the checkpoint's names and layout.
  whole_ = build(nn::LayerRange{}, NO_BUFFERS);
  for (int i = 0; i < whole_->num_layers(); ++i)
    if (!whole_->layer(i).buffers().empty())
      throw UserError("dist.pp " + std::to_string(stages) + ": layer " + std::to_string(i) + " '" +
                      whole_->layer_spec(i) +
                      "' keeps running statistics (BatchNorm): pipeline parallelism splits sequential models "
                      "without them (the transformers, MLPs); use --dist.pp 1 for this model");
  const std::vector<LayerCost> costs = layer_costs(*whole_, micro_batch_);
  partition_ = cfg_.dist.pp_split.empty() ? partition_balanced(costs, stages, chunks)
                                          : partition_explicit(costs, cfg_.dist.pp_split, stages, chunks);
  // A stage's model holds its chunks' layouts one after the other (one flat buffer to step and reduce).
  auto holder_range = [&](int s) {
    const StagePiece first = partition_.piece(s, 0);
    nn::LayerRange r{first.first, first.last, first.first > 0, {}};
    for (int c = 1; c < chunks; ++c)
      r.later.emplace_back(partition_.piece(s, c).first, partition_.piece(s, c).last);
    return r;
  };
  model_ = build(holder_range(me), stored_range());
  plan_ = chunks > 1 ? schedule_interleaved(stages, me, static_cast<int>(accum_), chunks)
                     : schedule_1f1b(stages, me, static_cast<int>(accum_));
  std::vector<int64_t> bases;
  std::vector<int> in_flight;
  int local = 0;  // the holder's index of chunk c's first layer
  for (int c = 0; c < chunks; ++c) {
    const StagePiece p = partition_.piece(me, c);
    bases.push_back(model_->layer_begin(local));
    local += p.last - p.first;
    std::vector<PipeAction> mine;
    for (const PipeAction& a : plan_)
      if (a.chunk == c) mine.push_back(a);
    in_flight.push_back(peak_in_flight(mine));
  }
  stage_ = std::make_unique<PipelineStage>(
      *model_, bases,
      [&](int c) {
        const StagePiece p = partition_.piece(me, c);
        return build(nn::LayerRange{p.first, p.last, p.first > 0, {}}, NO_BUFFERS);
      },
      in_flight, grid_.comm(dist::GroupKind::Pp, device_), micro_batch_);
  if (stage_->last(chunks - 1))  // the loss gradient of each micro-batch in flight through the head
    for (int k = 0; k < stage_->in_flight(chunks - 1); ++k)
      loss_grads_.emplace_back(whole_->output_shape().with_batch(micro_batch_), dtype, device_);
  // Every stage's model, as a layout: rank 0 puts checkpoints together from them; the last one's
  // tied copies say which of the first stage's parameters pair with them.
  std::vector<std::unique_ptr<nn::Model>> layouts;
  layouts.reserve(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) layouts.push_back(build(holder_range(s), NO_BUFFERS));
  for (const nn::ParamInfo& copy : layouts.back()->param_info()) {
    if (!copy.tied_copy) continue;
    for (const nn::ParamInfo& p : model_->param_info())
      if (p.name == copy.name && (p.tied_copy == (me == stages - 1)))
        tied_.emplace_back(p.offset, p.shape.count());
  }
  if (me == 0) piece_layouts_ = std::move(layouts);
}

void Trainer::pipeline_micro_batches(StepPhases& phases) {
  std::vector<MicroBatch> batches(static_cast<size_t>(accum_));
  bool reducing = false;  // the data-parallel reduction has begun (with the last chunk's last backward)
  for (const PipeAction& a : plan_) {
    const int m = a.micro, c = a.chunk;
    const std::string micro =
        " m" + std::to_string(m) + (stage_->chunks() > 1 ? " c" + std::to_string(c) : "");
    const double t0 = dist::monotonic_seconds();
    switch (a.op) {
      case PipeOp::RecvActivation: {
        const auto p = phases.enter(Phase::PipeWait);
        stage_->receive_activation(m, c, a.peer_stage);
        break;
      }
      case PipeOp::RecvGrad: {
        const auto p = phases.enter(Phase::PipeWait);
        stage_->receive_gradient(m, c, a.peer_stage);
        break;
      }
      case PipeOp::Forward: {
        // Every stage reads micro-batch m (in order) with its first chunk's forward; the first virtual
        // stage uses its inputs, the last its targets.
        MicroBatch& mb = batches[static_cast<size_t>(m)];
        if (c == 0) {
          mb = next_micro_batch(m, phases);
          // The head's forward comes chunks later: the targets are kept (the upload's buffer moves on).
          if (stage_->has_loss() && stage_->chunks() > 1) mb.y = keep(targets_, static_cast<size_t>(m), mb.y);
        }
        nn::Model& model = stage_->model_for(m, c);
        const Tensor& x = stage_->first(c) ? stage_->keep_input(m, mb.x) : stage_->input(m, c);
        if (stage_->last(c)) {
          forward_loss(model, x, mb, loss_grad(m), phases);
        } else {
          run_.step = mb.index;
          const auto p = phases.enter(Phase::Forward);
          model.forward(x, run_, params_arrive(phases));
        }
        tracer_->span("pipe", "forward" + micro, t0, dist::monotonic_seconds());
        break;
      }
      case PipeOp::SendActivation:
        stage_->send_activation(m, c, a.peer_stage);
        break;
      case PipeOp::Backward: {
        run_.step = batches[static_cast<size_t>(m)].index;
        nn::Model& model = stage_->model_for(m, c);
        // Each chunk's last backward hands the data-parallel reduction its buckets; the chunks hold
        // ascending parts of the stage's buffer and end in descending order, so its frontier only falls.
        const bool reduce = m + 1 == accum_;
        backward(model, stage_->last(c) ? loss_grad(m) : stage_->output_grad(m, c), reduce, phases,
                 stage_->base(c), reduce && !std::exchange(reducing, true));
        tracer_->span("pipe", "backward" + micro, t0, dist::monotonic_seconds());
        break;
      }
      case PipeOp::SendGrad:
        stage_->send_gradient(m, c, a.peer_stage);
        break;
    }
  }
  const auto p = phases.enter(Phase::PipeWait);
  stage_->finish_sends();
}

void Trainer::sum_tied_grads() {
  if (tied_.empty()) return;
  dist::Communicator& embed = grid_.comm(dist::GroupKind::Embed, device_);
  for (const auto& [offset, count] : tied_)
    embed.allreduce(model_->grads().slice(offset, Shape{count}), dist::ReduceOp::Sum);
}

double Trainer::pipeline_grad_norm(const Tensor& grads) {
  std::vector<std::pair<int64_t, int64_t>> copies;  // counted by their owners on the first stage
  for (const nn::ParamInfo& p : model_->param_info())
    if (p.tied_copy) copies.emplace_back(p.offset, p.offset + p.shape.count());
  double squares =
      grid_.tp() > 1 ? tp_grad_squares(*model_, grads, *sharding_, dp_comm_, grid_.host(dist::GroupKind::Tp))
                     : sharding_->grad_squares(grads, dp_comm_, copies);
  grid_.host(dist::GroupKind::Pp)
      .allreduce(Tensor::borrow(&squares, Shape{1}, DType::F64), dist::ReduceOp::Sum);
  return std::sqrt(squares);
}

Tensor Trainer::gather_stages(const Tensor& local) {
  Tensor mine = local;
  if (grid_.tp() > 1) {  // this stage's unsplit values first, on its tp rank 0, in the whole layout
    mine = gather_unsplit(*model_, local, grid_.host(dist::GroupKind::Tp));
    if (grid_.tp_rank() != 0) return Tensor();
  }
  const Tensor packed = pack_piece(*model_, mine, grid_.tp() > 1);
  dist::Communicator& pp = grid_.host(dist::GroupKind::Pp);
  if (!stage_->first()) {
    pp.send(packed, 0);
    return Tensor();
  }
  Tensor whole(Shape{whole_->num_full_params()}, DType::F32);
  unpack_piece(*model_, packed, whole);
  for (int s = 1; s < pp.size(); ++s) {  // one stage's piece at a time: one extra piece in memory
    const nn::Model& piece = *piece_layouts_[static_cast<size_t>(s)];
    const Tensor theirs(Shape{packed_count(piece)}, DType::F32);
    pp.recv(theirs, s);
    unpack_piece(piece, theirs, whole);
  }
  return whole;
}

void Trainer::report_bubbles() {
  char line[256];
  const double steps = static_cast<double>(std::max<int64_t>(1, pipe_steps_));
  std::snprintf(line, sizeof line,
                "pipeline: stage %d (rank %d) waited %.2f of its %.2f ms per step on its neighbours (%.1f%%; "
                "the bubble in theory %.1f%%)",
                stage_->stage(), ctx_.rank(), 1e3 * pipe_wait_s_ / steps, 1e3 * pipe_step_s_ / steps,
                pipe_step_s_ > 0 ? 100.0 * pipe_wait_s_ / pipe_step_s_ : 0.0, 100.0 * bubble_in_theory());
  const std::vector<std::string> lines = ctx_.gather_lines(line);
  if (pipe_steps_ > 0)
    for (const std::string& l : lines) progress_->line(l);
}

double Trainer::bubble_in_theory() const {
  const double p = grid_.pp(), vm = static_cast<double>(cfg_.dist.pp_virtual * accum_);
  return (p - 1) / (vm + p - 1);
}

std::string Trainer::stage_line() const {
  std::string layers;
  for (int c = 0; c < stage_->chunks(); ++c) {
    const StagePiece p = partition_.piece(stage_->stage(), c);
    layers += (c ? ", " : "") + std::to_string(p.first) +
              (p.last - 1 > p.first ? "–" + std::to_string(p.last - 1) : "");
  }
  std::string in_flight;
  for (int c = 0; c < stage_->chunks(); ++c)
    in_flight += (c ? "+" : "") + std::to_string(stage_->in_flight(c));
  char buf[200];
  std::snprintf(buf, sizeof buf, "layers %s, %s in flight, activations %.1f MiB", layers.c_str(),
                in_flight.c_str(), static_cast<double>(stage_->activation_bytes(micro_batch_)) / 1048576.0);
  return buf;
}

std::vector<std::string> Trainer::pipeline_lines() const {
  std::vector<std::string> lines;
  const int p = grid_.pp(), v = cfg_.dist.pp_virtual;
  const auto m = static_cast<int>(accum_);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "pipeline: %d stages, %s over %d micro-batches of %lld per step; the bubble in theory "
                "(P − 1)/(%sM + P − 1) = %.1f%% of a step",
                p,
                v > 1 ? ("interleaved 1F1B with " + std::to_string(v) + " chunks per stage").c_str() : "1F1B",
                m, static_cast<long long>(micro_batch_), v > 1 ? "V·" : "", 100.0 * bubble_in_theory());
  lines.emplace_back(buf);
  for (const std::string& l : describe_stages(partition_, layer_costs(*whole_, micro_batch_)))
    lines.push_back("  " + l);
  return lines;
}

}  // namespace hpc::train
