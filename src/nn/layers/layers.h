// The layer classes behind make_layer(): one small class per layer, its
// code in the .cpp named after it. Spec names and arguments:
//
//   linear(out, bias=1)                 any input, treated as [N, features]
//   conv(out, kernel, stride=1, pad=0, bias=1)   [C,H,W] input, NCHW
//   maxpool(kernel, stride=kernel)  avgpool(kernel, stride=kernel)  gap
//   bn(eps=1e-5, momentum=0.1)          BatchNorm1d on [F] (or [C,L]), 2d on [C,H,W]
//   relu  gelu  tanh  dropout(p)  flatten
//   res(layer …)                        y = body(x) + shortcut(x)
//   embed ln attn block lm_head         the GPT layers: declared in transformer.h
//
// Layers are declared here (rather than hidden in their .cpp files) so that
// res can build its projection from them and tests can reach test hooks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "nn/layer.h"
#include "nn/layers/conv_lowering.h"

namespace hpc::nn {

// The names make_layer knows, sorted (for "unknown layer" messages).
const std::vector<std::string>& layer_names();

class Linear final : public Layer {
 public:
  explicit Linear(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override { return 2 * in_ * out_; }

 private:
  std::string text_;
  int64_t out_ = 0, in_ = 0;
  bool has_bias_ = true;
  Tensor weight_, bias_, dweight_, dbias_;
};

// Convolution: the device's library where it takes the tensors (cuDNN, oneDNN:
// backend::conv2d_*), else im2col + GEMM (conv_lowering.h), the columns of a
// chunk of samples side by side ([C·k·k, n·Ho·Wo]) so each chunk is ONE large
// GEMM, the chunk size bounded by a column budget so memory stays bounded for
// any batch.
class Conv2d final : public Layer {
 public:
  explicit Conv2d(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override;
  int64_t output_block(int64_t in, int64_t block, bool out_may) const override;

  // Elements of the CPU column buffer; tests make it small to exercise chunking.
  void set_column_budget(int64_t elements) { scratch_.column_budget = elements; }

 private:
  std::string text_;
  int64_t out_ = 0;
  bool has_bias_ = true;
  kernels::ConvShape geom_;
  Tensor weight_, bias_, dweight_, dbias_;
  ConvScratch scratch_;  // reused from call to call
};

// maxpool / avgpool: square windows, no padding; the windows must tile the input.
class Pool2d final : public Layer {
 public:
  enum class Kind { Max, Average };
  Pool2d(Kind kind, const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;

 private:
  Kind kind_;
  std::string text_;
  kernels::PoolShape geom_;
  Tensor argmax_;  // I32, max pooling only
};

// Global average pooling: [C,H,W] → [C].
class GlobalAvgPool final : public Layer {
 public:
  explicit GlobalAvgPool(const LayerArgs& args);
  std::string spec() const override { return "gap"; }
  Shape build(const Shape& in, DType dtype) override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t output_block(int64_t in, int64_t block, bool out_may) const override;

 private:
  std::string text_;
  int64_t channels_ = 0, spatial_ = 1;
};

// BatchNorm, and SyncBatchNorm when ctx.sum_over_replicas is set: the per-channel sums are
// all-reduced so N ranks with batch b normalise exactly like 1 rank with N·b.
class BatchNorm final : public Layer {
 public:
  explicit BatchNorm(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  std::vector<std::pair<std::string, Tensor>> buffers() override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t output_block(int64_t in, int64_t block, bool out_may) const override;
  bool take_relu() override {
    relu_ = true;
    return true;
  }

 private:
  void follow_device(Device device);

  std::string text_;
  double eps_ = 1e-5, momentum_ = 0.1;
  bool zero_gamma_ = false;  // bn(gamma=0): gamma starts at 0
  int64_t channels_ = 0, spatial_ = 1;
  bool image_ = false;  // a CxHxW input (which may be channel-blocked)
  Tensor gamma_, beta_, dgamma_, dbeta_;
  Tensor running_mean_, running_var_;
  Tensor mean_, invstd_;      // what the last forward normalised with
  Tensor stats_, grad_sums_;  // F64 per-channel sums (the all-reduced quantities)
  bool batch_stats_ = true;   // whether the last forward used batch statistics
  bool relu_ = false;         // took the relu after it (nn/fusion.h)
};

// relu, gelu (tanh approximation), tanh.
class ActivationLayer final : public Layer {
 public:
  ActivationLayer(kernels::ActivationKind act, const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType) override { return in; }
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  // Elementwise: any layout, the output's that of the input.
  int64_t output_block(int64_t in, int64_t, bool out_may) const override {
    return in == 0 || out_may ? in : -1;
  }
  bool is_relu() const override { return act_ == kernels::ActivationKind::Relu; }

 private:
  kernels::ActivationKind act_;
};

// Inverted dropout; identity in evaluation. The mask is a pure function of
// (ctx.seed, ctx.step, ctx.layer, element), recomputed in backward.
class Dropout final : public Layer {
 public:
  explicit Dropout(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType) override { return in; }
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  void set_split(const TpSplit& tp) override { tp_ = tp; }

 private:
  uint64_t mask_offset(const RunCtx& ctx, const Tensor& x) const;

  double p_ = 0.5;
  TpSplit tp_;
};

class Flatten final : public Layer {
 public:
  explicit Flatten(const LayerArgs& args);
  std::string spec() const override { return "flatten"; }
  Shape build(const Shape& in, DType) override { return Shape{in.count()}; }
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
};

// y = body(x) + shortcut(x). The shortcut is the identity when the body keeps
// the shape, else a projection (ResNet option B): 1×1 conv with the body's
// stride and no bias, then bn ([C,H,W]); linear without bias, then bn ([F]).
class Residual final : public Layer {
 public:
  explicit Residual(const LayerArgs& args);
  std::string spec() const override;
  Shape build(const Shape& in, DType dtype) override;
  std::vector<ParamSpec> param_specs() const override;
  void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) override;
  std::vector<std::pair<std::string, Tensor>> buffers() override;
  void forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) override;
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                const RunCtx& ctx) override;
  int64_t forward_flops() const override;
  int64_t output_block(int64_t in, int64_t block, bool out_may) const override;
  void use_layout(int64_t in, int64_t block) override;
  bool take_relu() override {
    relu_ = true;
    return true;
  }
  void fold_inner() override;

  bool has_projection() const { return !short_.layers.empty(); }

 private:
  // One chain of layers (body or shortcut) and its scratch tensors.
  struct Branch {
    std::vector<std::unique_ptr<Layer>> layers;
    std::vector<Shape> out_shapes;
    std::vector<Tensor> acts;     // output of each layer
    std::vector<int64_t> blocks;  // channel blocks: [0] the input's, [j + 1] layer j's output's
    std::vector<bool> folded;     // relus folded into the layer before (nn/fusion.h): skipped
    Tensor grads[2];              // gradients between layers, ping-ponged (never dy and dx at once)
  };
  Shape build_branch(Branch& b, const Shape& in, DType dtype);
  Tensor act(Branch& b, size_t j, int64_t batch, Device device);
  void forward_branch(Branch& b, const Tensor& x, const RunCtx& ctx, uint64_t first_child);
  // Backpropagates dy through the branch; its first layer writes dx (which may be undefined).
  void backward_branch(Branch& b, const Tensor& x, const Tensor& dy, const Tensor& dx, const RunCtx& ctx,
                       uint64_t first_child);

  std::string text_;
  DType dtype_ = DType::F32;
  Branch body_, short_;
  Tensor short_dx_;    // scratch: the projection's input gradient
  bool relu_ = false;  // took the relu after it: y = max(body + shortcut, 0)
};

}  // namespace hpc::nn
