// A layer: one small class with forward and backward, written once against
// the backend ops (no device or dtype branches here).
//
// Life cycle: the spec parser constructs a layer from its arguments; Model
// calls build() with the input shape (no batch dimension) and the compute
// dtype, then binds the layer's parameters and gradients as views into the
// model's flat buffers, in param_specs() order. forward() writes y;
// backward() ADDS parameter gradients into the bound gradient views (so
// gradient accumulation is free) and writes dx unless dx is undefined (the
// first layer needs no input gradient).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/tensor_parallel.h"

namespace hpc::nn {

// How a parameter is initialised (from the model's seeded RNG).
enum class Init {
  Zeros,
  Ones,
  KaimingNormal,   // N(0, 2/fan_in): layers followed by ReLU (He et al. 2015)
  KaimingUniform,  // U(±1/sqrt(fan_in)) — PyTorch's Linear/Conv default
  XavierUniform,   // U(±sqrt(6/(fan_in+fan_out))) (Glorot & Bengio 2010)
  Normal002,       // N(0, 0.02²): embeddings, GPT-2 style
};

struct ParamSpec {
  // A constructor rather than aggregate initialisation, so that the fields
  // after weight_decay stay optional without -Wmissing-field-initializers.
  ParamSpec() = default;
  ParamSpec(std::string name_, Shape shape_, Init init_ = Init::KaimingUniform, int64_t fan_in_ = 0,
            int64_t fan_out_ = 0, bool weight_decay_ = true)
      : name(std::move(name_)),
        shape(std::move(shape_)),
        init(init_),
        fan_in(fan_in_),
        fan_out(fan_out_),
        weight_decay(weight_decay_) {}

  std::string name;  // "weight", "bias", "gamma", "beta"
  Shape shape;
  Init init = Init::KaimingUniform;
  int64_t fan_in = 0;
  int64_t fan_out = 0;
  bool weight_decay = true;  // false for biases and normalisation parameters
  double init_scale = 1.0;   // multiplies the drawn values (GPT-2: residual projections by 1/√(2·layers))
  // Non-empty: not a new parameter but the one of this name ("embed.token") in
  // the nearest earlier layer that has it, used a second time (a tied output
  // projection); gradients of both uses add up in its one gradient view.
  std::string tied_to;
  // A layer split over a tensor-parallel group (nn/tensor_parallel.h): how `shape`, this rank's
  // part, maps onto the unsplit parameter; fan_in and fan_out stay the unsplit ones. Replicated
  // (dim < 0) by default.
  ParamShard shard;
  // Replicated over the group but used on this rank's rows only (sequence parallelism: the norms,
  // the row-split projections' biases): its gradient here is this rank's part, summed over the
  // group by the trainer before the optimizer.
  bool tp_partial = false;
};

// Memory a layer keeps from forward to backward besides its output.
struct ActivationBytes {
  int64_t kept = 0;               // bytes held between forward and backward in the current mode
  int64_t without_recompute = 0;  // what it would hold if it did not recompute them in backward
  int64_t with_recompute = 0;     // what it would hold if it did (= without_recompute if it cannot)
};

// What a forward/backward pass needs to know beyond its tensors.
struct RunCtx {
  bool training = true;
  uint64_t seed = 0;   // run seed: dropout masks are a pure function of (seed, step, layer)
  uint64_t step = 0;   // micro-step counter
  uint64_t layer = 0;  // index of the layer being run (Model sets it; containers derive children's)
  // Set: SyncBatchNorm replaces its per-channel sums (a float64 tensor on the
  // activations' device) by their sum over every replica, in place. The
  // trainer binds it to its gradient communicator; unset: each rank alone.
  std::function<void(const Tensor& sums)> sum_over_replicas;
  int rank = 0;  // this replica's rank (data parallel): dropout draws different masks on each replica
  // Tensor parallelism (nn/tensor_parallel.h): the group's collectives when the model is split
  // (null otherwise). A dropout inside a split layer draws per part (its global coordinates),
  // one outside it the same mask on every rank of the group.
  TpComm* tp = nullptr;
  // Set (log.trace): Model calls it after each layer's forward / backward with
  // the layer's index and the start and end (monotonic seconds; host time).
  std::function<void(size_t layer, bool backward, double t0, double t1)> on_layer;
};

// The parsed arguments of one layer in a model spec, e.g. conv(32,3,pad=1):
// name "conv", positional {32, 3}, named {pad: 1}. res(...) carries children.
struct LayerArgs {
  std::string name;
  std::vector<double> positional;
  std::map<std::string, double> named;
  std::vector<LayerArgs> children;
  std::string text;  // the spec text it came from, for error messages
};

class Layer {
 public:
  virtual ~Layer() = default;

  // Spec text that rebuilds this layer, e.g. "conv(32,3,stride=1,pad=1)".
  virtual std::string spec() const = 0;
  // Fixes the input shape (no batch dim) and dtype; returns the output shape.
  // Throws UserError naming the layer when the input does not fit.
  virtual Shape build(const Shape& in, DType dtype) = 0;
  // The dtype this layer wants its input in when it is the model's first
  // layer and computes in `dtype` on `device`: `dtype`, unless the input is
  // something a compute dtype cannot carry exactly (token ids).
  virtual DType input_dtype(DType dtype, Device device) const {
    (void)device;
    return dtype;
  }
  virtual std::vector<ParamSpec> param_specs() const { return {}; }

  // Tensor parallelism (nn/tensor_parallel.h): the split the model is built for, given before
  // build(). tensor_parallel(): the layer runs split (or replicated, identical on every rank of
  // the group, like a norm) with it; a layer with parameters that says false cannot take part
  // in a split model, which is then refused, naming it.
  virtual void set_split(const TpSplit& tp) { (void)tp; }
  virtual bool tensor_parallel() const { return false; }
  // A split model's output is this layer's shard of a vocabulary (lm_head): the split; else vocab 0.
  virtual VocabSplit output_vocab() const { return {}; }
  virtual void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
    (void)params;
    (void)grads;
  }
  // Persistent state that is not trained (BatchNorm running statistics):
  // checkpointed, broadcast from rank 0 at start. Name and tensor.
  virtual std::vector<std::pair<std::string, Tensor>> buffers() { return {}; }

  virtual void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) = 0;
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                        const RunCtx& ctx) = 0;

  // Channel-blocked activations (core/tensor.h; nn/layout.h makes the choice
  // for a chain of layers): the block this layer's output comes in when its
  // input comes in `in` (0: plain, else `block`, the machine's, see
  // backend::channel_block) and its output may be blocked (out_may: the next
  // layer can take it); -1 when it cannot take an input in `in`. Every layer
  // takes a plain input, and returns `block` only when out_may. The default:
  // plain only.
  virtual int64_t output_block(int64_t in, int64_t block, bool out_may) const {
    (void)block;
    (void)out_may;
    return in == 0 ? 0 : -1;
  }
  // The layout chosen: the input comes in `in`. A container fixes its children's here.
  virtual void use_layout(int64_t in, int64_t block) {
    (void)in;
    (void)block;
  }

  // Folding a relu into the layer before it (nn/fusion.h), where the device's
  // ops can (backend::fuses_relu). is_relu: this layer is exactly y = max(x, 0).
  // take_relu: the layer agrees to apply the relu that follows it to its own
  // output; from then on forward writes max(output, 0) into y, and backward
  // gets that y and the relu's dy, which it may overwrite (the chain does not
  // read it again). The relu layer is then skipped and its output is this
  // layer's. fold_inner: a container folds the relus in its own chains.
  virtual bool is_relu() const { return false; }
  virtual bool take_relu() { return false; }
  virtual void fold_inner() {}

  // Incremental decoding (hpctrain sample's key/value cache), one sequence at
  // a time: start_decode forgets earlier positions and makes room for
  // max_positions; decode's x [1, n, …] holds positions [pos, pos + n), the
  // ones after those of the earlier decode calls, and y gets their outputs —
  // what forward gives those rows of a window holding the whole sequence.
  // Layers that work token by token (norms, the MLP, the head) decode with
  // forward on the n rows; attention keeps its keys and values, the
  // embedding and rotary look up positions. can_decode: the layer can.
  virtual bool can_decode() const { return false; }
  virtual void start_decode(int64_t max_positions) { (void)max_positions; }
  virtual void decode(const Tensor& x, const Tensor& y, int64_t pos, const RunCtx& ctx) {
    (void)pos;
    forward(x, y, ctx);
  }

  // Multiply-adds ×2 of one sample's forward pass (backward counts as 2×).
  virtual int64_t forward_flops() const { return 0; }
  // Intermediate activations kept for backward at this batch size (not the output).
  virtual ActivationBytes activation_bytes(int64_t batch) const {
    (void)batch;
    return {};
  }
};

// Builds a layer from parsed spec arguments; UserError on unknown names or bad arguments.
std::unique_ptr<Layer> make_layer(const LayerArgs& args);

}  // namespace hpc::nn
