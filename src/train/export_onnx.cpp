// hpctrain export --format onnx: the inference graph as an ONNX model
// (opset 13), built with the protobuf classes of Debian's libonnx-dev.
//
// Every layer becomes standard operators: conv → Conv, linear → Gemm
// (transB = 1: hpctrain's weight is [out, in]), bn → BatchNormalization in
// its inference form (the running statistics), relu/tanh → Relu/Tanh,
// maxpool/avgpool → MaxPool/AveragePool, gap → GlobalAveragePool + Flatten,
// flatten → Flatten(axis 1), res → the body, the projection shortcut when
// there is one (1x1 Conv or Gemm without bias, then BatchNormalization) and
// Add; dropout is left out (the identity at inference). Parameters are
// float32 initializers under hpctrain's names. The GPT layers (embed, block,
// attn, ln, lm_head) and gelu are refused, naming the layer: use --format
// torch or hf for those. Input "x" [N, *input_shape], output "logits".
#include <map>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "nn/spec.h"
#include "train/export.h"

#ifdef HPCTRAIN_ONNX
#include <onnx/onnx_pb.h>
#endif

namespace hpc::train {

#ifndef HPCTRAIN_ONNX

bool onnx_available() { return false; }
std::string onnx_bytes(const ckpt::Checkpoint&, const nn::Model&, const std::string& what) {
  throw UserError(what +
                  ": this hpctrain was built without ONNX support (install Debian's libonnx-dev and "
                  "libprotobuf-dev, then rebuild: `make` shows ✓ ONNX export)");
}

#else

bool onnx_available() { return true; }

namespace {

class Emitter {
 public:
  Emitter(onnx::GraphProto* g, const ckpt::Checkpoint& c, const nn::Model& model, std::string what)
      : g_(g), what_(std::move(what)) {
    for (const nn::ParamInfo& p : model.param_info())
      params_[p.name] = {p.shape, c.params.data<float>() + p.offset};
    for (const ckpt::NamedTensor& b : c.buffers) params_[b.name] = {b.value.shape(), b.value.data<float>()};
  }

  // Emits layer `a` (tensor names start with `prefix`) on `x` of sample shape `shape`; returns the output.
  std::string layer(const nn::LayerArgs& a, const std::string& prefix, const std::string& x, Shape& shape,
                    const std::string& where) {
    const std::string& k = a.name;
    auto num = [&](const char* key, double dflt) {
      auto it = a.named.find(key);
      return it == a.named.end() ? dflt : it->second;
    };
    if (k == "dropout") return x;
    if (k == "relu" || k == "tanh") return node(k == "relu" ? "Relu" : "Tanh", {x});
    if (k == "flatten") {
      shape = Shape{shape.count()};
      return node("Flatten", {x}, [](onnx::NodeProto* n) { attr_i(n, "axis", 1); });
    }
    if (k == "gap") {
      const std::string y = node("GlobalAveragePool", {x});
      shape = Shape{shape[0]};
      return node("Flatten", {y}, [](onnx::NodeProto* n) { attr_i(n, "axis", 1); });
    }
    if (k == "conv") {
      const int64_t out = static_cast<int64_t>(a.positional.at(0)),
                    kk = static_cast<int64_t>(a.positional.at(1));
      const int64_t s = static_cast<int64_t>(num("stride", 1)), p = static_cast<int64_t>(num("pad", 0));
      std::vector<std::string> in = {x, init(prefix + "weight")};
      if (num("bias", 1) != 0) in.push_back(init(prefix + "bias"));
      shape = Shape{out, (shape[1] + 2 * p - kk) / s + 1, (shape[2] + 2 * p - kk) / s + 1};
      return node("Conv", in, [&](onnx::NodeProto* n) {
        attr_is(n, "kernel_shape", {kk, kk});
        attr_is(n, "strides", {s, s});
        attr_is(n, "pads", {p, p, p, p});
      });
    }
    if (k == "linear") {
      const int64_t out = static_cast<int64_t>(a.positional.at(0));
      std::vector<std::string> in = {x, init(prefix + "weight")};
      if (num("bias", 1) != 0) in.push_back(init(prefix + "bias"));
      shape = Shape{out};
      return node("Gemm", in, [](onnx::NodeProto* n) { attr_i(n, "transB", 1); });
    }
    if (k == "bn") {
      const float eps = static_cast<float>(num("eps", 1e-5));
      return node("BatchNormalization",
                  {x, init(prefix + "gamma"), init(prefix + "beta"), init(prefix + "running_mean"),
                   init(prefix + "running_var")},
                  [eps](onnx::NodeProto* n) { attr_f(n, "epsilon", eps); });
    }
    if (k == "maxpool" || k == "avgpool") {
      const int64_t kk = static_cast<int64_t>(a.positional.at(0)),
                    s = static_cast<int64_t>(num("stride", double(kk))),
                    p = static_cast<int64_t>(num("pad", 0));
      shape = Shape{shape[0], (shape[1] + 2 * p - kk) / s + 1, (shape[2] + 2 * p - kk) / s + 1};
      return node(k == "maxpool" ? "MaxPool" : "AveragePool", {x}, [&](onnx::NodeProto* n) {
        attr_is(n, "kernel_shape", {kk, kk});
        attr_is(n, "strides", {s, s});
        if (p > 0) attr_is(n, "pads", {p, p, p, p});
      });
    }
    if (k == "res") {
      const Shape in_shape = shape;
      std::string y = x;
      for (size_t j = 0; j < a.children.size(); ++j)
        y = layer(a.children[j], prefix + "body." + std::to_string(j) + ".", y, shape,
                  where + " > " + a.children[j].name);
      std::string s = x;
      if (!(shape ==
            in_shape)) {  // the projection hpctrain builds: 1x1 conv (or linear) without bias, then bn
        const std::string sp = prefix + "shortcut.";
        if (in_shape.rank() == 3) {
          int64_t stride = 1;
          for (int64_t st = 1; st <= std::max(in_shape[1], in_shape[2]); ++st)
            if ((in_shape[1] - 1) / st + 1 == shape[1] && (in_shape[2] - 1) / st + 1 == shape[2]) {
              stride = st;
              break;
            }
          s = node("Conv", {x, init(sp + "0.weight")}, [&](onnx::NodeProto* n) {
            attr_is(n, "kernel_shape", {1, 1});
            attr_is(n, "strides", {stride, stride});
          });
        } else {
          s = node("Gemm", {x, init(sp + "0.weight")}, [](onnx::NodeProto* n) { attr_i(n, "transB", 1); });
        }
        s = node("BatchNormalization",
                 {s, init(sp + "1.gamma"), init(sp + "1.beta"), init(sp + "1.running_mean"),
                  init(sp + "1.running_var")},
                 [](onnx::NodeProto* n) { attr_f(n, "epsilon", 1e-5f); });
      }
      return node("Add", {y, s});
    }
    throw UserError(what_ + ": " + where + " '" + k +
                    "' cannot be expressed in the ONNX export (opset 13 covers conv, linear, bn, relu, tanh, "
                    "pools, gap, flatten, dropout, res); use --format torch" +
                    (k == "embed" || k == "block" || k == "lm_head" ? " or hf" : ""));
  }

 private:
  static void attr_i(onnx::NodeProto* n, const char* name, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto* n, const char* name, float v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr_is(onnx::NodeProto* n, const char* name, std::initializer_list<int64_t> v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  template <class Attrs = void (*)(onnx::NodeProto*)>
  std::string node(
      const char* op, const std::vector<std::string>& in, Attrs attrs = [](onnx::NodeProto*) {}) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(std::string(op) + "_" + std::to_string(count_));
    for (const std::string& i : in) n->add_input(i);
    std::string out = "t" + std::to_string(count_++);
    n->add_output(out);
    attrs(n);
    return out;
  }
  std::string init(const std::string& name) {
    auto it = params_.find(name);
    if (it == params_.end()) throw UserError(what_ + ": the checkpoint has no tensor '" + name + "'");
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int d = 0; d < it->second.first.rank(); ++d) t->add_dims(it->second.first[d]);
    t->set_raw_data(it->second.second, static_cast<size_t>(it->second.first.count()) * sizeof(float));
    return name;
  }

  onnx::GraphProto* g_;
  std::string what_;
  std::map<std::string, std::pair<Shape, const float*> > params_;
  int count_ = 0;
};

void value_info(onnx::ValueInfoProto* v, const std::string& name, const Shape& sample) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("N");
  for (int d = 0; d < sample.rank(); ++d) t->mutable_shape()->add_dim()->set_dim_value(sample[d]);
}

}  // namespace

std::string onnx_bytes(const ckpt::Checkpoint& c, const nn::Model& model, const std::string& what) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("hpctrain");
  m.set_model_version(c.step);
  m.set_doc_string("hpctrain model: " + model.spec());
  onnx::OperatorSetIdProto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("hpctrain");
  Emitter e(g, c, model, what);
  Shape shape = c.input_shape;
  std::string x = "x";
  const std::vector<nn::LayerArgs> layers = nn::parse_spec(model.spec());
  for (size_t i = 0; i < layers.size(); ++i)
    x = e.layer(layers[i], std::to_string(i) + "." + layers[i].name + ".", x, shape,
                "layer " + std::to_string(i));
  value_info(g->add_input(), "x", c.input_shape);
  // The last node's output is renamed "logits".
  onnx::NodeProto* last = g->mutable_node(g->node_size() - 1);
  for (int i = 0; i < last->output_size(); ++i)
    if (last->output(i) == x) last->set_output(i, "logits");
  value_info(g->add_output(), "logits", shape);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw UserError(what + ": the ONNX model could not be serialised");
  return bytes;
}

#endif

}  // namespace hpc::train
