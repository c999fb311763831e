// A model: a sequence of layers whose parameters all live in ONE flat
// parameter buffer and whose gradients live in ONE flat gradient buffer with
// the same layout. That makes the start-up broadcast one call,
// gradient buckets contiguous slices, checkpoints one dataset, and the
// optimizer one fused loop.
//
// Layout: parameters in forward layer order, each layer's in its
// param_specs() order. Backward runs in reverse, so gradients become final
// from the END of the buffer towards the start; backward() reports that
// frontier after every layer so the GradReducer can start a bucket's
// AllReduce as soon as the bucket is complete.
//
// Fully sharded (ZeRO stage 3, dist/sharded_params.h): a model may store only
// a range of its flat buffers (StoredRange), its shard. Its layers are then
// bound to no memory of the model's own: a ParamSource, called before and
// after every layer's forward and backward, gathers the parameters a layer
// needs into buffers of its own and binds the layer to them (bind_layer).
// The layout — offsets, names, the canonical spec — is the same either way,
// so checkpoints, the optimizer's decay ranges and the shard bounds do not
// depend on what a rank stores.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/layer.h"

namespace hpc::nn {

// Where a layer's parameter lives in the flat layout: its own offset, or for a
// tied parameter (ParamSpec::tied_to) its owner's.
struct ParamSlot {
  int64_t offset = 0;
  Shape shape;
};

// What a Model stores of its flat buffers. range: given the model's parameter
// count, the elements [lo, hi) it stores (unset: all of them). grads_only:
// the parameters are stored whole and only the gradients are cut (ZeRO
// stage 2 on a GPU, whose gradient buffer cannot give pages back).
struct StoredRange {
  std::function<std::pair<int64_t, int64_t>(int64_t num_params)> range;
  bool grads_only = false;
};

// Called by Model around every layer (index `layer`) when set: where the
// parameters of a model that stores only its shard come from. forward's
// hooks get the pass's RunCtx (training or evaluation); backward follows a
// training forward.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual void before_forward(size_t layer, const RunCtx& ctx) = 0;
  virtual void after_forward(size_t layer, const RunCtx& ctx) = 0;
  virtual void before_backward(size_t layer) = 0;
  virtual void after_backward(size_t layer) = 0;
};

struct ParamInfo {
  std::string name;  // "3.conv.weight": layer index, layer kind, parameter name
  int layer = 0;
  int64_t offset = 0;  // element offset in the flat buffers
  Shape shape;
  bool weight_decay = true;
  // Tensor parallelism (nn/tensor_parallel.h): how this rank's part maps onto the unsplit
  // parameter (replicated: dim < 0 and shard.full = shape, so take_shard / put_shard copy it
  // whole), its unsplit shape and its offset in the unsplit model's flat layout (a checkpoint's).
  // Unsplit, full_shape = shape and full_offset = offset.
  ParamShard shard{};
  Shape full_shape{};
  int64_t full_offset = 0;
  // A pipeline stage's copy of a tied parameter whose owner is on another stage (LayerRange):
  // full_offset is the owner's; its gradient is summed with the owner's before the optimizer.
  bool tied_copy = false;
  // Replicated, but its gradient here is only this rank's part (sequence parallelism: used on this
  // rank's rows only): the trainer sums it over the tensor-parallel group before the optimizer.
  bool tp_partial = false;
};

// A pipeline stage's piece of a model (dist.pp): layers [first, last) of the spec, built for the
// shapes the whole model gives them, with the whole model's initial values (each parameter's own
// random stream), parameter names ("5.block.…": the layer's index in the whole model), full_offset
// (the whole model's flat layout: a checkpoint's) and dropout coordinates (RunCtx::layer is the
// whole model's index). A tied parameter whose owner lies outside the piece (GPT's lm_head on the
// last stage) is held here as a copy of its owner (ParamInfo::tied_copy), initialised like it; the
// trainer sums the two copies' gradients. input_grad: backward also writes the gradient of the
// input (input_grad()), which the stage before receives.
//
// later: further [first, last) ranges of a stage's interleaved chunks (dist.pp_virtual): the model
// then holds the layout of all of them, one after the other, as the flat buffers the stage's
// optimizer and reducer step; each chunk runs as a model of its own range bound to its part of
// those buffers (share_params_of(holder, base)). Such a model is a layout, not run itself.
struct LayerRange {
  int first = 0;
  int last = -1;  // -1: to the end
  bool input_grad = false;
  std::vector<std::pair<int, int>> later;
};

class Model {
 public:
  // Builds every layer for `input_shape` (no batch dim), allocates the flat
  // buffers in `dtype` on `device` and initialises parameters from `seed`
  // (on the host, so every device starts from the same values). Layers keep
  // their own state (BatchNorm statistics, scratch) on the device of the
  // tensors they are given.
  Model(const std::string& spec, const Shape& input_shape, DType dtype, uint64_t seed,
        Device device = Device::CPU, const StoredRange& stored = {});
  // The same from a spec already parsed (nn::parse_spec).
  // tp: the tensor-parallel split to build for (nn/tensor_parallel.h): each rank holds its part of
  // the layers that split, initialised as its slice of the unsplit initialisation. A layer with
  // parameters that cannot split is a UserError naming it.
  // range: a pipeline stage's piece of the layers (LayerRange); input_shape stays the whole model's.
  Model(const std::vector<LayerArgs>& layers, const Shape& input_shape, DType dtype, uint64_t seed,
        Device device = Device::CPU, const StoredRange& stored = {}, const TpSplit& tp = {},
        const LayerRange& range = {});

  // Binds this model's layers to the flat buffers of `primary` from element `base` on (primary:
  // built from the same layers and range, or holding this range's layout at base among others
  // (LayerRange::later), and storing its buffers whole; this one stores none: StoredRange [0, 0)):
  // a second set of activations and saved state over the same parameters, for a pipeline stage's
  // micro-batches in flight or interleaved chunks. Backward adds into primary's gradients.
  void share_params_of(Model& primary, int64_t base = 0);

  const std::string& spec() const { return spec_; }  // canonical text (each layer's spec())
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  DType dtype() const { return dtype_; }
  // The dtype forward() wants its input in: the first layer's say
  // (Layer::input_dtype; token ids stay float32 on a GPU), else dtype().
  DType input_dtype() const { return input_dtype_; }
  Device device() const { return device_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // A pipeline piece (LayerRange): the whole model's index of layer 0 here, and the gradient of the
  // input that the last backward wrote (undefined unless built with input_grad).
  int first_layer() const { return first_; }
  const Tensor& input_grad() const { return dacts_.empty() ? acts_none_ : dacts_[0]; }
  // The output of the last forward (valid until the next one).
  const Tensor& forward_output() const { return acts_.empty() ? acts_none_ : acts_.back(); }
  // Layer i's spec text ("linear(64)"), for timelines.
  std::string layer_spec(int i) const { return layers_[static_cast<size_t>(i)]->spec(); }
  // The channel block (core/tensor.h, nn/layout.h) of layer i's output: 0 plain.
  int64_t output_block(int i) const { return blocks_[static_cast<size_t>(i) + 1]; }
  Layer& layer(int i) { return *layers_[static_cast<size_t>(i)]; }

  // The flat buffers, [num_params] — or what this model stores of them (StoredRange): elements
  // [params_lo(), params_lo() + params().count()) of the layout, and the same for the gradients.
  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  int64_t params_lo() const { return params_lo_; }
  int64_t grads_lo() const { return grads_lo_; }
  bool stores_whole_params() const { return params_.count() == num_params_; }
  bool stores_whole_grads() const { return grads_.count() == num_params_; }
  int64_t num_params() const { return num_params_; }
  const std::vector<ParamInfo>& param_info() const { return info_; }
  // Layer i's parameters in the layout, in its param_specs() order (tied ones at their owner's offset),
  // and the range [begin, end) of the ones it owns (empty for a layer without parameters of its own).
  const std::vector<ParamSlot>& layer_params(int i) const { return slots_[static_cast<size_t>(i)]; }
  int64_t layer_begin(int i) const { return layer_offset_[static_cast<size_t>(i)]; }
  int64_t layer_end(int i) const;
  // Binds layer i's parameters and gradients to the views `at` returns for each of its slots
  // (a ParamSource's gathered copies; an undefined gradient where backward will not run).
  void bind_layer(int i, const std::function<std::pair<Tensor, Tensor>(const ParamSlot&)>& at);
  // Installs (or, null, removes) the hooks around every layer; the model does not own it.
  void set_param_source(ParamSource* source) { source_ = source; }
  // The tensor-parallel split it was built for, and the unsplit model's parameter count
  // (= num_params() unsplit; the parameters' full_offset are offsets in that layout).
  const TpSplit& split() const { return tp_; }
  int64_t num_full_params() const { return num_full_params_; }
  // The model's output is a shard of a vocabulary (a split lm_head's logits): which. The last
  // layer's Layer::output_vocab (vocab 0: the output is no vocabulary).
  VocabSplit output_vocab() const;
  // Non-trained persistent state (BatchNorm running statistics), named "3.bn.running_mean".
  std::vector<std::pair<std::string, Tensor>> buffers();

  // x: [N, input...]. Returns the output [N, output...] (owned by the model, valid until the next forward).
  // Before each layer, calls before_layer(end): the layer reads parameters at flat offsets < end
  // only (its own and, tied, an earlier layer's), which must be final when the call returns.
  const Tensor& forward(const Tensor& x, const RunCtx& ctx,
                        const std::function<void(int64_t end)>& before_layer = {});
  // dout: gradient of the output. Adds into grads(). After each layer, calls
  // on_ready(frontier): every gradient at flat offset ≥ frontier is final.
  void backward(const Tensor& dout, const RunCtx& ctx,
                const std::function<void(int64_t frontier)>& on_ready = {});
  void zero_grads();

  // Incremental decoding of one sequence (Layer::decode; hpctrain sample's
  // key/value cache) for a model whose layers all can (a language model):
  // start_decode forgets the last sequence and makes room for max_positions;
  // decode takes ids [1, n] at positions [pos, pos + n) and returns their
  // outputs [1, n, …] (owned by the model, valid until the next call) — the
  // rows forward gives when the window holds the whole sequence. UserError
  // naming the first layer that cannot decode.
  void start_decode(int64_t max_positions);
  const Tensor& decode(const Tensor& ids, int64_t pos, const RunCtx& ctx);

  // Table of layers: spec, output shape, parameter count; and the total.
  std::string summary() const;
  // FLOPs of one sample's forward pass (a training step is ≈ 3×).
  int64_t forward_flops() const;
  // Activation memory of a training step with `batch` samples: the layer
  // outputs and their gradients (held here) plus what layers keep for
  // backward, plus the one block a recomputing layer rebuilds at a time;
  // `without_recompute` / `with_recompute`: the same with recompute off / on
  // in every layer that can recompute.
  ActivationBytes activation_bytes(int64_t batch) const;

 private:
  void ensure_activations(int64_t batch);

  std::string spec_;
  Shape input_shape_, output_shape_;
  DType dtype_, input_dtype_;
  Device device_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> out_shapes_;      // per layer, no batch dim
  std::vector<int64_t> blocks_;        // channel block of each activation, as acts_ (nn/layout.h)
  std::vector<bool> folded_;           // relus folded into the layer before (nn/fusion.h): skipped
  std::vector<int64_t> layer_offset_;  // first flat offset of each layer's parameters
  std::vector<std::vector<ParamSlot>> slots_;
  std::vector<ParamInfo> info_;
  int64_t num_params_ = 0;
  int64_t params_lo_ = 0, grads_lo_ = 0;  // what params_ and grads_ start at in the layout
  TpSplit tp_;
  int64_t num_full_params_ = 0;
  int first_ = 0;            // LayerRange::first
  std::vector<int> index_;   // each layer's index in the whole model
  bool input_grad_ = false;  // LayerRange::input_grad
  bool shared_ = false;      // share_params_of: the layers are bound to another model's buffers
  Tensor acts_none_;         // input_grad() before any backward
  Tensor params_, grads_;
  ParamSource* source_ = nullptr;
  std::vector<Tensor> acts_, dacts_;  // acts_[i+1] = output of layer i; acts_[0] = the input view
  std::vector<Tensor> decode_acts_;   // decode's outputs per layer, for the last n
  int64_t batch_ = -1;
};

}  // namespace hpc::nn
