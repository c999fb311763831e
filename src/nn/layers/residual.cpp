// Residual block (He et al. 2016): y = body(x) + shortcut(x).
//
// The body is the layers written inside res(...). The shortcut is the
// identity when the body keeps the shape; otherwise it is the projection of
// ResNet "option B", built here from the ordinary layers: a 1×1 conv with
// the body's stride and no bias, then bn (a bias-free linear then bn for
// flat inputs). The stride is read off the shapes, so the body may reach it
// any way it likes (a strided conv, a pool).
//
// Children get distinct ctx.layer values (64·layer + index + 1) so dropout
// inside a block draws its own masks.
#include <algorithm>

#include "backend/ops.h"
#include "core/error.h"
#include "nn/fusion.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/layers.h"
#include "nn/layout.h"

namespace hpc::nn {

namespace {

constexpr uint64_t CHILD_SLOTS = 64;

RunCtx child_ctx(const RunCtx& ctx, uint64_t index) {
  RunCtx c = ctx;
  c.layer = ctx.layer * CHILD_SLOTS + index + 1;
  return c;
}

LayerArgs args_of(std::string name, std::vector<double> positional, std::map<std::string, double> named) {
  LayerArgs a{std::move(name), std::move(positional), std::move(named), {}, ""};
  a.text = args_text(a);
  return a;
}

}  // namespace

Residual::Residual(const LayerArgs& args) {
  ArgReader r(args, {}, /*takes_children=*/true);
  text_ = r.text();
  r.finish();
  if (args.children.empty()) r.fail("res needs the layers of its body, e.g. res(conv(16,3,pad=1) bn relu)");
  if (args.children.size() > CHILD_SLOTS - 3)
    r.fail("res holds at most " + std::to_string(CHILD_SLOTS - 3) + " layers");
  for (const LayerArgs& child : args.children) body_.layers.push_back(make_layer(child));
}

std::string Residual::spec() const {
  std::string s = "res(";
  for (size_t j = 0; j < body_.layers.size(); ++j) s += (j ? " " : "") + body_.layers[j]->spec();
  return s + ")";
}

Shape Residual::build_branch(Branch& b, const Shape& in, DType dtype) {
  Shape shape = in;
  b.out_shapes.clear();
  for (auto& layer : b.layers) {
    shape = layer->build(shape, dtype);
    b.out_shapes.push_back(shape);
  }
  b.acts.assign(b.layers.size(), Tensor());
  b.blocks.assign(b.layers.size() + 1, 0);  // plain until use_layout says otherwise
  b.folded.assign(b.layers.size(), false);  // nothing folded until fold_inner
  return shape;
}

Shape Residual::build(const Shape& in, DType dtype) {
  dtype_ = dtype;
  Shape out = build_branch(body_, in, dtype);  // not const: returned, so moved
  short_.layers.clear();
  if (out == in) return out;
  if (in.rank() == 3 && out.rank() == 3) {
    int64_t stride = 0;
    for (int64_t s = 1; s <= std::max(in[1], in[2]) && stride == 0; ++s)
      if ((in[1] - 1) / s + 1 == out[1] && (in[2] - 1) / s + 1 == out[2]) stride = s;
    if (stride == 0)
      throw_layer_error(text_, "the body maps " + in.str() + " to " + out.str() +
                                   ", which no strided 1x1 projection of the input can match");
    short_.layers.push_back(
        make_layer(args_of("conv", {double(out[0]), 1}, {{"stride", double(stride)}, {"bias", 0}})));
  } else if (in.rank() == 1 && out.rank() == 1) {
    short_.layers.push_back(make_layer(args_of("linear", {double(out[0])}, {{"bias", 0}})));
  } else {
    throw_layer_error(text_, "the body maps " + in.str() + " to " + out.str() +
                                 "; a projection shortcut exists only for CxHxW→CxHxW and F→F");
  }
  short_.layers.push_back(make_layer(args_of("bn", {}, {})));
  const Shape short_out = build_branch(short_, in, dtype);
  HPC_ASSERT(short_out == out, "res: projection shape " + short_out.str() + " vs " + out.str());
  return out;
}

std::vector<ParamSpec> Residual::param_specs() const {
  std::vector<ParamSpec> specs;
  auto add = [&](const Branch& b, const std::string& prefix) {
    for (size_t j = 0; j < b.layers.size(); ++j)
      for (ParamSpec p : b.layers[j]->param_specs()) {
        p.name = prefix + std::to_string(j) + "." + p.name;
        specs.push_back(std::move(p));
      }
  };
  add(body_, "body.");
  add(short_, "shortcut.");
  return specs;
}

void Residual::bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
  HPC_ASSERT(params.size() == grads.size() && params.size() == param_specs().size(), "res: bind count");
  size_t next = 0;
  for (Branch* b : {&body_, &short_})
    for (auto& layer : b->layers) {
      const size_t k = layer->param_specs().size();
      layer->bind(std::vector<Tensor>(params.begin() + long(next), params.begin() + long(next + k)),
                  std::vector<Tensor>(grads.begin() + long(next), grads.begin() + long(next + k)));
      next += k;
    }
}

std::vector<std::pair<std::string, Tensor>> Residual::buffers() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto [b, prefix] : {std::pair{&body_, "body."}, std::pair{&short_, "shortcut."}})
    for (size_t j = 0; j < b->layers.size(); ++j)
      for (auto& [name, t] : b->layers[j]->buffers())
        out.emplace_back(prefix + std::to_string(j) + "." + name, t);
  return out;
}

int64_t Residual::forward_flops() const {
  int64_t f = 0;
  for (const Branch* b : {&body_, &short_})
    for (const auto& layer : b->layers) f += layer->forward_flops();
  return f;
}

// A blocked input (the layers before it keep oneDNN's layout) is taken when
// the output may be blocked too, the body and the shortcut both give their
// outputs blocked, and so the add sees one layout; a plain input gives a
// plain output (its body's inner activations may still be blocked).
int64_t Residual::output_block(int64_t in, int64_t block, bool out_may) const {
  if (in == 0) return 0;
  if (!out_may) return -1;
  const std::vector<int64_t> body = chain_blocks(body_.layers, in, block, true);
  const std::vector<int64_t> shortcut =
      short_.layers.empty() ? std::vector<int64_t>{in} : chain_blocks(short_.layers, in, block, true);
  return !body.empty() && !shortcut.empty() && body.back() == in && shortcut.back() == in ? in : -1;
}

// A blocked input means a blocked output (output_block), so the branches end blocked too.
void Residual::use_layout(int64_t in, int64_t block) {
  body_.blocks = use_chain_layout(body_.layers, in, block, in != 0);
  short_.blocks =
      short_.layers.empty() ? std::vector<int64_t>{in} : use_chain_layout(short_.layers, in, block, in != 0);
}

void Residual::fold_inner() {
  body_.folded = fold_relus(body_.layers);
  short_.folded = fold_relus(short_.layers);
}

// A folded relu's output is the layer before's.
Tensor Residual::act(Branch& b, size_t j, int64_t batch, Device device) {
  while (b.folded[j]) --j;
  return scratch(b.acts[j], b.out_shapes[j].with_batch(batch), dtype_, device)
      .with_channel_block(b.blocks[j + 1]);
}

void Residual::forward_branch(Branch& b, const Tensor& x, const RunCtx& ctx, uint64_t first_child) {
  const int64_t n = x.shape()[0];
  Tensor in = x;
  for (size_t j = 0; j < b.layers.size(); ++j) {
    if (b.folded[j]) continue;  // the layer before wrote its output
    const Tensor out = act(b, j, n, x.device());
    b.layers[j]->forward(in, out, child_ctx(ctx, first_child + j));
    in = out;
  }
}

void Residual::backward_branch(Branch& b, const Tensor& x, const Tensor& dy, const Tensor& dx,
                               const RunCtx& ctx, uint64_t first_child) {
  const int64_t n = x.shape()[0];
  Tensor g = dy;    // gradient of layer j's output (a folded relu's is the layer before's)
  size_t next = 0;  // the scratch gradient that g is not
  for (size_t j = b.layers.size(); j-- > 0;) {
    if (b.folded[j]) continue;
    const Tensor in = j == 0 ? x : act(b, j - 1, n, x.device());
    const Tensor g_in = j == 0 ? dx
                               : scratch(b.grads[next], b.out_shapes[j - 1].with_batch(n), dtype_, x.device())
                                     .with_channel_block(b.blocks[j]);
    next ^= 1;
    b.layers[j]->backward(in, act(b, j, n, x.device()), g, g_in, child_ctx(ctx, first_child + j));
    g = g_in;
  }
}

void Residual::forward(const Tensor& x, const Tensor& y, const RunCtx& ctx) {
  const int64_t n = x.shape()[0];
  forward_branch(body_, x, ctx, 0);
  const Tensor body_out = act(body_, body_.layers.size() - 1, n, x.device());
  Tensor short_out = x;
  if (!short_.layers.empty()) {
    forward_branch(short_, x, ctx, body_.layers.size());
    short_out = act(short_, short_.layers.size() - 1, n, x.device());
  }
  if (relu_)
    backend::add_relu(body_out, short_out, y);
  else
    backend::elementwise_add(body_out, short_out, y);
}

// With a folded relu, dy (the relu's) is masked by y > 0 in place first: the
// chain's own buffer, which nothing reads after (nn/fusion.h).
void Residual::backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                        const RunCtx& ctx) {
  if (relu_) backend::activation_backward(kernels::ActivationKind::Relu, y, y, dy, dy);
  backward_branch(body_, x, dy, dx, ctx, 0);
  if (short_.layers.empty()) {
    if (dx.defined()) backend::elementwise_add(dx, dy, dx);
    return;
  }
  const Tensor short_dx =
      dx.defined() ? scratch(short_dx_, x.shape(), dtype_, x.device()).with_channel_block(x.channel_block())
                   : Tensor();
  backward_branch(short_, x, dy, short_dx, ctx, body_.layers.size());
  if (dx.defined()) backend::elementwise_add(dx, short_dx, dx);
}

}  // namespace hpc::nn
