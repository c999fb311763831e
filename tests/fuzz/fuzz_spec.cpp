// Fuzz target: the model-spec parser (src/nn/spec.cpp) and the layers built from it.
//
// Feeds: byte 0 picks the input shape (1x8x8, 3x6x6, 16, 2x5x7: small, so a
// build is cheap); the rest is the spec text, as a user would give it in
// --model.spec or a checkpoint carries it.
// Checks: parse_spec, every layer's argument reading and build() on that
// shape, Model construction and, for small models, one forward and backward
// pass of a batch of 2 end in success or a UserError. A model that builds
// must rebuild from its canonical spec() to the same spec and parameter
// count (checkpoints store that text and compare it on resume).
// Bounds: a spec that asks for more than 2^22 parameters or activations of
// more than 2^20 elements per layer is a valid request for a big model, not
// a bug; its layers are built (shape arithmetic checked) but the model is not
// allocated, so the fuzzer stays fast and far below -rss_limit_mb.
#include <cstdint>
#include <string>

#include "backend/ops.h"
#include "core/tensor.h"
#include "fuzz_util.h"
#include "nn/model.h"
#include "nn/spec.h"

namespace {

constexpr const char* TARGET = "spec";
constexpr int64_t MAX_PARAMS = int64_t(1) << 22;
constexpr int64_t MAX_ACTIVATION = int64_t(1) << 20;
constexpr int64_t MAX_FLOPS = int64_t(1) << 24;

// Builds the layers one by one (as Model does) and says whether the model is small enough to allocate.
bool small_enough(const std::string& text, const hpc::Shape& input) {
  using namespace hpc;
  Shape shape = input;
  int64_t params = 0;
  for (const nn::LayerArgs& args : nn::parse_spec(text)) {
    std::unique_ptr<nn::Layer> layer = nn::make_layer(args);
    shape = layer->build(shape, DType::F32);
    for (int64_t d : shape.dims())
      if (d < 0 || d > MAX_ACTIVATION) return false;
    if (shape.count() > MAX_ACTIVATION) return false;
    for (const nn::ParamSpec& p : layer->param_specs()) {
      for (int64_t d : p.shape.dims())
        if (d < 0 || d > MAX_PARAMS) return false;
      if (p.shape.count() > MAX_PARAMS) return false;
      params += p.shape.count();
      if (params > MAX_PARAMS) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  if (size < 1) return 0;
  static const Shape SHAPES[] = {Shape{1, 8, 8}, Shape{3, 6, 6}, Shape{16}, Shape{2, 5, 7}};
  const Shape input = SHAPES[data[0] % 4];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  fuzz::expect_clean(TARGET, [&] {
    if (!small_enough(text, input)) return;
    nn::Model model(text, input, DType::F32, 1);
    nn::Model again(model.spec(), input, DType::F32, 1);
    fuzz::require(
        again.spec() == model.spec() && again.num_params() == model.num_params(), TARGET,
        "canonical spec '" + model.spec() + "' does not rebuild the same model (got '" + again.spec() + "')");
    if (model.forward_flops() > MAX_FLOPS) return;
    Tensor x(input.with_batch(2), DType::F32);
    backend::fill(x, 0.5);
    nn::RunCtx ctx;
    const Tensor& y = model.forward(x, ctx);
    Tensor dy(y.shape(), DType::F32);
    backend::fill(dy, 1.0);
    model.backward(dy, ctx);
  });
  return 0;
}
