// Model: builds layers from a spec, owns the flat parameter/gradient buffers
// and the activations, and runs forward and backward over the layer list.
#include "nn/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "backend/ops.h"
#include "core/error.h"
#include "core/mem_ledger.h"
#include "core/rng.h"
#include "nn/fusion.h"
#include "nn/layout.h"
#include "nn/spec.h"

namespace hpc::nn {

namespace {
// The clock of RunCtx::on_layer: the same steady clock as dist::monotonic_seconds.
double layer_clock() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

namespace {

// Fills one parameter per its ParamSpec from its own random stream, so
// adding a layer does not change the initialisation of the others. Element i
// of the unsplit tensor draws from the stream's counter i (two counters for a
// normal), so a tensor-parallel part draws exactly its slice of the unsplit
// tensor (ParamSpec::shard); padding is zero.
void init_param(const Tensor& host, const ParamSpec& p, uint64_t seed, uint64_t stream) {
  Rng rng(seed, stream);
  const double fan_in = static_cast<double>(p.fan_in > 0 ? p.fan_in : 1);
  const double fan_out = static_cast<double>(p.fan_out > 0 ? p.fan_out : 1);
  std::vector<double> v(static_cast<size_t>(host.count()));
  const uint64_t draws = p.init == Init::KaimingNormal || p.init == Init::Normal002 ? 2
                         : p.init == Init::Zeros || p.init == Init::Ones            ? 0
                                                                                    : 1;
  const std::vector<int64_t> where = p.shard.split() ? p.shard.global_index() : std::vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    double& x = v[i];
    if (!where.empty()) {
      if (where[i] < 0) {  // padding of a split vocabulary
        x = 0;
        continue;
      }
      rng.set_counter(static_cast<uint64_t>(where[i]) * draws);
    }
    switch (p.init) {
      case Init::Zeros:
        x = 0;
        break;
      case Init::Ones:
        x = 1;
        break;
      case Init::KaimingNormal:
        x = rng.normal() * std::sqrt(2.0 / fan_in);
        break;
      case Init::KaimingUniform:
        x = (2 * rng.uniform() - 1) / std::sqrt(fan_in);
        break;
      case Init::XavierUniform:
        x = (2 * rng.uniform() - 1) * std::sqrt(6.0 / (fan_in + fan_out));
        break;
      case Init::Normal002:
        x = 0.02 * rng.normal();
        break;
    }
    x *= p.init_scale;
  }
  backend::convert(Tensor::borrow(v.data(), host.shape(), DType::F64), host);
}

std::string layer_kind(const std::string& spec) { return spec.substr(0, spec.find('(')); }

// A parameter of the whole model (every layer's, a pipeline piece's or not): its name, random
// stream, offset in the whole unsplit layout, spec and layer.
struct Owned {
  std::string name;
  uint64_t stream;
  int64_t full_offset;
  ParamSpec spec;
  int layer;
};

// The nearest parameter of a layer before `layer` named like ps.tied_to ("embed.token" matches
// "0.embed.token"), which must have ps's shape.
const Owned& tied_owner(const std::vector<Owned>& whole, const ParamSpec& ps, const std::string& spec,
                        int layer) {
  const std::string suffix = "." + ps.tied_to;
  // Reverse iterators rather than std::views::reverse: clang 14 with libstdc++ 12
  // (the fuzz and lint builds) cannot compile the ranges view.
  for (auto it = whole.rbegin(); it != whole.rend(); ++it) {
    const Owned& owner = *it;
    const std::string& n = owner.name;
    if (owner.layer >= layer || n.size() <= suffix.size() ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    if (owner.spec.shape != ps.shape)
      throw UserError("layer '" + spec + "': its " + ps.name + " " + ps.shape.str() + " is tied to " + n +
                      ", which is " + owner.spec.shape.str() + " (vocabulary and width must match)");
    return owner;
  }
  throw UserError("layer '" + spec + "': its " + ps.name + " is tied to the " + ps.tied_to +
                  " parameter of an earlier layer, but the model has none before it");
}

// The offset of the parameter called `name` in a layout.
int64_t local_offset(const std::vector<ParamInfo>& info, const std::string& name) {
  for (const ParamInfo& p : info)
    if (p.name == name) return p.offset;
  HPC_ASSERT(false, "model: a tied parameter's owner is not in the layout");
  return 0;
}

}  // namespace

Model::Model(const std::string& spec, const Shape& input_shape, DType dtype, uint64_t seed, Device device,
             const StoredRange& stored)
    : Model(parse_spec(spec), input_shape, dtype, seed, device, stored, TpSplit()) {}

Model::Model(const std::vector<LayerArgs>& layers, const Shape& input_shape, DType dtype, uint64_t seed,
             Device device, const StoredRange& stored, const TpSplit& tp, const LayerRange& range)
    : input_shape_(input_shape), dtype_(dtype), input_dtype_(dtype), device_(device), tp_(tp) {
  HPC_ASSERT(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size,
             "model: tensor-parallel rank outside its group");
  if (tp.sequence_split() && (input_shape.rank() < 1 || input_shape[0] % tp.size != 0))
    throw UserError("dist.sequence_parallel: the context of " +
                    std::to_string(input_shape.rank() < 1 ? 0 : input_shape[0]) +
                    " tokens is not divisible by dist.tp " + std::to_string(tp.size) +
                    " (each rank of the group holds an equal part of the sequence)");
  const int count = static_cast<int>(layers.size());
  const int last = range.last < 0 ? count : range.last;
  HPC_ASSERT(0 <= range.first && range.first < last && last <= count,
             "model: the layer range lies outside the spec");
  first_ = range.first;
  input_grad_ = range.input_grad;
  auto kept = [&](int i) {
    if (i >= first_ && i < last) return true;
    for (const auto& [a, b] : range.later)
      if (i >= a && i < b) return true;
    return false;
  };
  // Every layer of the spec is built: the whole model's parameters fix each one's random stream and
  // its offset in the whole (unsplit) layout. A pipeline piece keeps layers [first, last).
  std::vector<Owned> whole;
  uint64_t next_stream = 1;
  Shape shape = input_shape;
  std::vector<std::vector<ParamSpec>> specs;
  for (int i = 0; i < count; ++i) {
    std::unique_ptr<Layer> layer = make_layer(layers[static_cast<size_t>(i)]);
    layer->set_split(tp);
    if (i == first_) input_shape_ = shape;
    shape = layer->build(shape, dtype);
    if (tp.active() && !layer->tensor_parallel() && !layer->param_specs().empty())
      throw UserError("dist.tp " + std::to_string(tp.size) + ": layer " + std::to_string(i) + " '" +
                      layer->spec() +
                      "' cannot be split over a tensor-parallel group (tensor parallelism splits the "
                      "transformer models' layers); use --dist.tp 1 for this model");
    for (const ParamSpec& p : layer->param_specs()) {
      if (!p.tied_to.empty()) continue;  // a tied parameter is stored once, by its owner
      whole.push_back({std::to_string(i) + "." + layer_kind(layer->spec()) + "." + p.name, next_stream++,
                       num_full_params_, p, i});
      num_full_params_ += (p.shard.split() ? p.shard.full : p.shape).count();
    }
    if (!kept(i)) continue;
    index_.push_back(i);
    out_shapes_.push_back(shape);
    specs.push_back(layer->param_specs());
    layers_.push_back(std::move(layer));
  }
  output_shape_ = out_shapes_.back();
  input_dtype_ = layers_.front()->input_dtype(dtype, device);
  for (size_t i = 0; i < layers_.size(); ++i) spec_ += (i ? " " : "") + layers_[i]->spec();

  // This piece's layout: each kept layer's own parameters in order, and a copy of a tied parameter
  // whose owner is not here. owner[k]: the whole model's parameter slot k of layer i holds.
  std::vector<std::vector<const Owned*>> owner(layers_.size());
  int64_t total = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int global = index_[i];
    layer_offset_.push_back(total);
    size_t next = 0;
    while (next < whole.size() && whole[next].layer < global) ++next;
    for (const ParamSpec& ps : specs[i]) {
      const Owned* o = nullptr;
      if (ps.tied_to.empty()) {
        o = &whole[next++];
      } else {
        o = &tied_owner(whole, ps, layers_[i]->spec(), global);
        if (kept(o->layer)) continue;  // the owner is here: the slot points at it (below)
      }
      total += ps.shape.count();
      owner[i].push_back(o);
    }
  }

  // What this model stores: everything, or a range (a shard: ZeRO stage 3, or its gradients only).
  num_params_ = total;
  const auto [lo, hi] = stored.range ? stored.range(total) : std::pair<int64_t, int64_t>{0, total};
  HPC_ASSERT(0 <= lo && lo <= hi && hi <= total, "model: the stored range lies outside the parameters");
  params_lo_ = stored.grads_only ? 0 : lo;
  grads_lo_ = lo;
  {
    const MemUseScope use(MemUse::Params);
    params_ = Tensor(Shape{stored.grads_only ? total : hi - lo}, dtype, device);
  }
  {
    const MemUseScope use(MemUse::Grads);
    grads_ = Tensor(Shape{hi - lo}, dtype, device);
  }
  // Each parameter is drawn whole on the host (float32, or float64 for a float64 model) from its own
  // stream, and the stored part of it kept: a shard holds exactly the values of the whole buffer.
  // A whole CPU model is initialised in place; otherwise through a host copy, uploaded.
  const DType init_dtype = dtype == DType::F64 ? DType::F64 : DType::F32;
  const bool in_place = device == Device::CPU && stores_whole_params();
  const Tensor init = in_place ? params_ : Tensor(Shape{params_.count()}, init_dtype);
  for (size_t i = 0; i < layers_.size(); ++i) {
    int64_t offset = layer_offset_[i];
    std::vector<ParamSlot> slots;
    size_t own = 0;
    for (const ParamSpec& tied : specs[i]) {
      if (!tied.tied_to.empty()) {
        const Owned& o = tied_owner(whole, tied, layers_[i]->spec(), index_[i]);
        if (kept(o.layer)) {  // the second use of a parameter an earlier layer here holds
          slots.push_back({local_offset(info_, o.name), tied.shape});
          continue;
        }
      }
      const Owned& o = *owner[i][own++];
      const ParamSpec& ps = o.spec;  // a copy is initialised and laid out like its owner
      slots.push_back({offset, ps.shape});
      const int64_t n = ps.shape.count();
      HPC_ASSERT(!ps.shard.split() || ps.shard.local_shape() == ps.shape,
                 "layer '" + layers_[i]->spec() + "': " + ps.name + " is not its shard's shape");
      const int64_t a = std::max(offset, params_lo_), b = std::min(offset + n, params_lo_ + params_.count());
      if (a == offset && b == offset + n) {
        init_param(init.slice(offset - params_lo_, ps.shape), ps, seed, o.stream);
      } else if (a < b) {
        const Tensor whole_param(ps.shape, init_dtype);
        init_param(whole_param, ps, seed, o.stream);
        backend::copy(whole_param.slice(a - offset, Shape{b - a}), init.slice(a - params_lo_, Shape{b - a}));
      }
      ParamInfo info;
      info.name = o.name;
      info.layer = index_[i];
      info.offset = offset;
      info.shape = ps.shape;
      info.weight_decay = ps.weight_decay;
      info.shard = ps.shard;
      if (!ps.shard.split()) info.shard.full = ps.shape;  // replicated: the part is the whole tensor
      info.full_shape = info.shard.full;
      info.full_offset = o.full_offset;
      info.tp_partial = ps.tp_partial;
      info.tied_copy = !tied.tied_to.empty();
      info_.push_back(std::move(info));
      offset += n;
    }
    slots_.push_back(std::move(slots));
  }
  // A model that stores its buffers whole binds its layers to them; a shard's are bound by its ParamSource.
  if (stores_whole_params() && stores_whole_grads())
    for (size_t i = 0; i < layers_.size(); ++i)
      bind_layer(static_cast<int>(i), [this](const ParamSlot& s) {
        return std::pair{params_.slice(s.offset, s.shape), grads_.slice(s.offset, s.shape)};
      });
  // The data comes plain, the output leaves plain; in between, what the layers allow.
  blocks_ = use_chain_layout(layers_, 0, backend::channel_block(device, dtype), false);
  folded_ = backend::fuses_relu(device) ? fold_relus(layers_) : std::vector<bool>(layers_.size(), false);
  if (!in_place && params_.count() > 0) {
    if (init_dtype == dtype) {
      backend::copy(init, params_);
    } else {  // e.g. bfloat16 on the GPU: upload as float32, round there
      const Tensor staged(Shape{params_.count()}, init_dtype, device);
      backend::copy(init, staged);
      backend::convert(staged, params_);
    }
  }
}

int64_t Model::layer_end(int i) const {
  return static_cast<size_t>(i) + 1 < layers_.size() ? layer_offset_[static_cast<size_t>(i) + 1]
                                                     : num_params_;
}

VocabSplit Model::output_vocab() const {
  return layers_.empty() ? VocabSplit() : layers_.back()->output_vocab();
}

void Model::share_params_of(Model& primary, int64_t base) {
  // The layers here are those of primary from the one at `base`, the same parameters in the same order.
  size_t at = 0;
  while (at < primary.layers_.size() && primary.layer_offset_[at] < base) ++at;
  bool same = primary.stores_whole_params() && primary.stores_whole_grads() && params_.count() == 0 &&
              at + layers_.size() <= primary.layers_.size() && base + num_params_ <= primary.num_params_;
  for (size_t i = 0; same && i < layers_.size(); ++i)
    same = primary.index_[at + i] == index_[i] && primary.layers_[at + i]->spec() == layers_[i]->spec() &&
           primary.layer_offset_[at + i] == base + layer_offset_[i];
  HPC_ASSERT(same,
             "share_params_of: not the same piece of the model, or not a model without buffers of its own");
  for (size_t i = 0; i < layers_.size(); ++i)
    bind_layer(static_cast<int>(i), [&primary, base](const ParamSlot& s) {
      return std::pair{primary.params_.slice(base + s.offset, s.shape),
                       primary.grads_.slice(base + s.offset, s.shape)};
    });
  shared_ = true;
}

void Model::bind_layer(int i, const std::function<std::pair<Tensor, Tensor>(const ParamSlot&)>& at) {
  std::vector<Tensor> p, g;
  for (const ParamSlot& s : slots_[static_cast<size_t>(i)]) {
    auto [param, grad] = at(s);
    p.push_back(std::move(param));
    g.push_back(std::move(grad));
  }
  layers_[static_cast<size_t>(i)]->bind(p, g);
}

std::vector<std::pair<std::string, Tensor>> Model::buffers() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < layers_.size(); ++i)
    for (auto& [name, t] : layers_[i]->buffers())
      out.emplace_back(std::to_string(i) + "." + layer_kind(layers_[i]->spec()) + "." + name, t);
  return out;
}

void Model::ensure_activations(int64_t batch) {
  if (batch == batch_) return;
  acts_.assign(layers_.size() + 1, Tensor());
  dacts_.assign(layers_.size() + 1, Tensor());
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (folded_[i]) continue;  // below
    const int64_t block = blocks_[i + 1];
    acts_[i + 1] = Tensor(out_shapes_[i].with_batch(batch), dtype_, device_).with_channel_block(block);
    // The last layer's output gradient is the caller's (the loss writes it).
    if (i + 1 < layers_.size())
      dacts_[i + 1] = Tensor(out_shapes_[i].with_batch(batch), dtype_, device_).with_channel_block(block);
  }
  if (input_grad_) dacts_[0] = Tensor(input_shape_.with_batch(batch), dtype_, device_);
  // A folded relu (never the last layer) shares the output and its gradient
  // with the layer before, which writes the one and reads the other.
  for (size_t i = 0; i < layers_.size(); ++i)
    if (folded_[i]) {
      acts_[i + 1] = acts_[i];
      dacts_[i + 1] = dacts_[i];
    }
  batch_ = batch;
}

const Tensor& Model::forward(const Tensor& x, const RunCtx& ctx,
                             const std::function<void(int64_t)>& before_layer) {
  check_shape(x, input_shape_.with_batch(x.shape()[0]), "model input");
  HPC_ASSERT((x.dtype() == input_dtype_ || x.dtype() == dtype_) && x.device() == device_,
             "model input dtype or device");
  HPC_ASSERT(source_ != nullptr || shared_ || (stores_whole_params() && stores_whole_grads()),
             "a model that stores a shard runs only with its ParamSource");
  ensure_activations(x.shape()[0]);
  acts_[0] = x;
  RunCtx layer_ctx = ctx;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layer_ctx.layer = static_cast<uint64_t>(index_[i]);  // the whole model's index: dropout's coordinate
    if (before_layer) before_layer(i + 1 < layers_.size() ? layer_offset_[i + 1] : num_params_);
    if (source_) source_->before_forward(i, ctx);
    if (!folded_[i]) {  // a folded relu: the layer before applied it
      const double t0 = ctx.on_layer ? layer_clock() : 0;
      layers_[i]->forward(acts_[i], acts_[i + 1], layer_ctx);
      if (ctx.on_layer) ctx.on_layer(i, false, t0, layer_clock());
    }
    if (source_) source_->after_forward(i, ctx);
  }
  return acts_.back();
}

void Model::backward(const Tensor& dout, const RunCtx& ctx, const std::function<void(int64_t)>& on_ready) {
  HPC_ASSERT(batch_ >= 0 && acts_[0].defined(), "backward before forward");
  check_shape(dout, acts_.back().shape(), "model output gradient");
  RunCtx layer_ctx = ctx;
  for (size_t i = layers_.size(); i-- > 0;) {
    if (source_) source_->before_backward(i);
    if (!folded_[i]) {  // a folded relu was applied by the layer before; it has no parameters
      layer_ctx.layer = static_cast<uint64_t>(index_[i]);
      const Tensor& dy = i + 1 == layers_.size() ? dout : dacts_[i + 1];
      const double t0 = ctx.on_layer ? layer_clock() : 0;
      // The first layer's input is the data (no gradient needed there), unless a stage before sent it.
      layers_[i]->backward(acts_[i], acts_[i + 1], dy, i == 0 && !input_grad_ ? Tensor() : dacts_[i],
                           layer_ctx);
      if (ctx.on_layer) ctx.on_layer(i, true, t0, layer_clock());
    }
    if (source_) source_->after_backward(i);
    if (on_ready) on_ready(layer_offset_[i]);
  }
  acts_[0] = Tensor();  // do not keep the caller's batch alive
}

void Model::zero_grads() {
  if (grads_.count() > 0) backend::fill(grads_, 0.0);
}

void Model::start_decode(int64_t max_positions) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]->can_decode())
      throw UserError("layer " + std::to_string(i) + " '" + layers_[i]->spec() +
                      "' cannot decode one position at a time (only the language models' layers can)");
    layers_[i]->start_decode(max_positions);
  }
  decode_acts_.clear();
}

const Tensor& Model::decode(const Tensor& ids, int64_t pos, const RunCtx& ctx) {
  const int64_t n = ids.count();
  HPC_ASSERT(ids.shape().rank() == 2 && ids.shape()[0] == 1 && n >= 1 && ids.device() == device_,
             "decode: ids must be [1, n] on the model's device");
  if (decode_acts_.empty() || decode_acts_.front().shape()[1] != n) {
    decode_acts_.clear();
    for (const Shape& out : out_shapes_) {
      std::vector<int64_t> dims = {1, n};  // [T, rest…] → [1, n, rest…]
      for (int d = 1; d < out.rank(); ++d) dims.push_back(out[d]);
      decode_acts_.emplace_back(Shape(dims), dtype_, device_);
    }
  }
  RunCtx layer_ctx = ctx;
  layer_ctx.training = false;
  const Tensor* x = &ids;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layer_ctx.layer = static_cast<uint64_t>(index_[i]);
    layers_[i]->decode(*x, decode_acts_[i], pos, layer_ctx);
    x = &decode_acts_[i];
  }
  return decode_acts_.back();
}

std::string Model::summary() const {
  std::ostringstream s;
  char line[256];
  std::snprintf(line, sizeof line, "  %-3s %-44s %-14s %12s\n", "#", "layer", "output", "params");
  s << line;
  std::snprintf(line, sizeof line, "  %-3s %-44s %-14s %12s\n", "", "input", input_shape_.str().c_str(), "");
  s << line;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int64_t n = layer_end(static_cast<int>(i)) - layer_offset_[i];
    std::string spec = layers_[i]->spec();
    if (spec.size() > 44) spec.replace(41, std::string::npos, "...");
    std::snprintf(line, sizeof line, "  %-3zu %-44s %-14s %12lld\n", static_cast<size_t>(index_[i]),
                  spec.c_str(), out_shapes_[i].str().c_str(), static_cast<long long>(n));
    s << line;
  }
  std::snprintf(line, sizeof line, "  total parameters: %lld (%.2f MiB as %s)\n",
                static_cast<long long>(num_params_),
                static_cast<double>(num_params_) * static_cast<double>(dtype_size(dtype_)) / 1048576.0,
                dtype_name(dtype_));
  s << line;
  // Counted multiply-adds ×2 of the layers with a forward_flops(); `make bench` turns it into GFLOP/s.
  std::snprintf(line, sizeof line, "  forward: %.3f MFLOP per sample (a training step is about 3x that)\n",
                static_cast<double>(forward_flops()) / 1e6);
  s << line;
  return s.str();
}

int64_t Model::forward_flops() const {
  int64_t f = 0;
  for (const auto& l : layers_) f += l->forward_flops();
  return f;
}

ActivationBytes Model::activation_bytes(int64_t batch) const {
  int64_t held = 0, kept = 0, without = 0, with = 0, rebuilt = 0, rebuilt_all = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int64_t out = out_shapes_[i].count() * batch * int64_t(dtype_size(dtype_));
    if (!folded_[i])
      held += i + 1 < layers_.size() ? 2 * out : out;  // output, and its gradient except the last's
    const ActivationBytes a = layers_[i]->activation_bytes(batch);
    kept += a.kept;
    without += a.without_recompute;
    with += a.with_recompute;
    rebuilt = std::max(rebuilt, a.without_recompute - a.kept);
    rebuilt_all = std::max(rebuilt_all, a.without_recompute - a.with_recompute);
  }
  return {held + kept + rebuilt, held + without, held + with + rebuilt_all};
}

}  // namespace hpc::nn
