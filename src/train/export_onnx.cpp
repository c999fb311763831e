// hpctrain export --format onnx: the inference graph as an ONNX model
// (opset 17), built with the protobuf classes of Debian's libonnx-dev.
//
// Image and tabular models: conv → Conv, linear → Gemm (transB = 1:
// hpctrain's weight is [out, in]), bn → BatchNormalization in its inference
// form (the running statistics), relu/tanh → Relu/Tanh, gelu → its tanh
// formula in standard ops, maxpool/avgpool → MaxPool/AveragePool, gap →
// GlobalAveragePool + Flatten, flatten → Flatten(axis 1), res → the body,
// the projection shortcut when there is one (1x1 Conv or Gemm without bias,
// then BatchNormalization) and Add; dropout is left out (the identity at
// inference). Input "x" [N, *input_shape] float32, normalised as the
// training data was (metadata_props say how: input_scale, input_mean,
// input_std), output "logits".
//
// Language models (GPT-2 and Llama): input "input_ids" [batch, seq] int64
// (seq up to the model's context), output "logits" [batch, seq, vocab].
// embed → Gather (+ the position table sliced to seq), ln →
// LayerNormalization, rmsnorm → its formula (ReduceMean of x², Sqrt, Div,
// Mul), attention → MatMul projections, heads by Reshape/Transpose, rotary
// as its ops (cos/sin tables of the context's positions sliced to seq, the
// rotate-half by Split/Neg/Concat), grouped kv heads repeated by
// Unsqueeze/Concat/Reshape, the causal mask as a boolean table sliced to
// seq and Where, Softmax, and the projections back; the GELU MLP's tanh
// GELU from Mul/Add/Tanh (opset 17 has no Gelu), SwiGLU from Sigmoid/Mul;
// lm_head → MatMul with the (tied) token matrix.
//
// Parameters are float32 initializers under hpctrain's names. A layer without
// a mapping is a UserError naming it. metadata_props also carry the spec and
// the producer's version.
#include <cmath>
#include <map>
#include <set>

#include "config/config.h"
#include "core/error.h"
#include "kernels/llama_math.h"
#include "nn/spec.h"
#include "train/export.h"
#include "train/model_source.h"

#ifdef HPCTRAIN_ONNX
#include <onnx/onnx_pb.h>
#endif

namespace hpc::train {

#ifndef HPCTRAIN_ONNX

bool onnx_available() { return false; }
std::string onnx_bytes(const ModelSource&, const nn::Model&, const std::string& what,
                       const std::vector<std::pair<std::string, std::string>>&) {
  throw UserError(what +
                  ": this hpctrain was built without ONNX support (install Debian's libonnx-dev and "
                  "libprotobuf-dev, then rebuild: `make` shows ✓ ONNX export)");
}

#else

bool onnx_available() { return true; }

namespace {

double named(const nn::LayerArgs& a, const char* key, double fallback) {
  const auto it = a.named.find(key);
  return it == a.named.end() ? fallback : it->second;
}

class Emitter {
 public:
  Emitter(onnx::GraphProto* g, const ModelSource& src, const nn::Model& model, std::string what)
      : g_(g), what_(std::move(what)) {
    for (const nn::ParamInfo& p : model.param_info())
      params_[p.name] = {p.shape, src.params.data<float>() + p.offset};
    for (const ckpt::NamedTensor& b : src.buffers) params_[b.name] = {b.value.shape(), b.value.data<float>()};
  }

  // ---- image and tabular layers ---------------------------------------------------------

  // Emits layer `a` (tensor names start with `prefix`) on `x` of sample shape `shape`; returns the output.
  std::string layer(const nn::LayerArgs& a, const std::string& prefix, const std::string& x, Shape& shape,
                    const std::string& where) {
    const std::string& k = a.name;
    auto num = [&](const char* key, double dflt) { return named(a, key, dflt); };
    if (k == "dropout") return x;
    if (k == "relu" || k == "tanh") return node(k == "relu" ? "Relu" : "Tanh", {x});
    if (k == "gelu") return gelu(x);
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
    throw UserError(
        what_ + ": " + where + " '" + k +
        "' cannot be expressed in the ONNX export (opset 17 covers conv, linear, bn, relu, tanh, gelu, "
        "pools, gap, flatten, dropout, res and the language models' layers); use --format torch");
  }

  // ---- language models: [batch, seq, width] rows --------------------------------------------

  // Emits language-model layer `a` on `x` [B, S, C]; ids is the input_ids tensor.
  std::string lm_layer(const nn::LayerArgs& a, const std::string& prefix, const std::string& x,
                       const std::string& where) {
    const std::string& k = a.name;
    if (k == "embed") {
      const int64_t context = int64_t(a.positional.at(2)),
                    positions = int64_t(named(a, "positions", double(context)));
      context_ = context;
      seq_ = node("Gather", {node("Shape", {x}), ints({1})});  // [1]: the input's seq length
      std::string tok =
          node("Gather", {init(prefix + "token"), x}, [](onnx::NodeProto* n) { attr_i(n, "axis", 0); });
      if (positions == 0) return tok;
      return node("Add", {tok, rows(init(prefix + "position"), seq_)});
    }
    if (k == "ln") return layernorm(x, prefix + "gamma", prefix + "beta", named(a, "eps", 1e-5));
    if (k == "rmsnorm") return rmsnorm(x, prefix + "weight", named(a, "eps", 1e-5));
    if (k == "lm_head") {
      const bool tied = named(a, "tied", 1) == 1;
      return linear(x, tied ? "0.embed.token" : prefix + "weight", "");
    }
    if (k == "attn") {
      const int64_t heads = int64_t(a.positional.at(0));
      const bool bias = named(a, "bias", 1) == 1;
      return attention(x, prefix, heads, int64_t(named(a, "kv_heads", double(heads))), bias, rotary_of(a, 0));
    }
    if (k == "mlp") return mlp_gelu(x, prefix);
    if (k == "swiglu") return mlp_swiglu(x, prefix);
    if (k == "block" || k == "llama_block") {
      const bool llama = k == "llama_block";
      const int64_t heads = int64_t(a.positional.at(0)), kv = int64_t(named(a, "kv_heads", double(heads)));
      const double eps = named(a, "eps", 1e-5);
      const std::string a1 = llama ? rmsnorm(x, prefix + "ln1.weight", eps)
                                   : layernorm(x, prefix + "ln1.gamma", prefix + "ln1.beta", 1e-5);
      const std::string h = node(
          "Add", {x, attention(a1, prefix + "attn.", heads, kv, !llama, rotary_of(a, llama ? 10000 : 0))});
      const std::string a2 = llama ? rmsnorm(h, prefix + "ln2.weight", eps)
                                   : layernorm(h, prefix + "ln2.gamma", prefix + "ln2.beta", 1e-5);
      return node("Add", {h, llama ? mlp_swiglu(a2, prefix + "mlp.") : mlp_gelu(a2, prefix + "mlp.")});
    }
    throw UserError(what_ + ": " + where + " '" + k +
                    "' cannot be expressed in the ONNX export of a language model");
  }

  std::string init(const std::string& name) {
    if (!added_.insert(name).second) return name;
    auto it = params_.find(name);
    if (it == params_.end()) throw UserError(what_ + ": the model has no tensor '" + name + "'");
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int d = 0; d < it->second.first.rank(); ++d) t->add_dims(it->second.first[d]);
    t->set_raw_data(it->second.second, static_cast<size_t>(it->second.first.count()) * sizeof(float));
    return name;
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
  std::vector<std::string> nodes(
      const char* op, const std::vector<std::string>& in, int outputs,
      Attrs attrs = [](onnx::NodeProto*) {}) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(std::string(op) + "_" + std::to_string(count_));
    for (const std::string& i : in) n->add_input(i);
    std::vector<std::string> out;
    for (int o = 0; o < outputs; ++o) {
      out.push_back("t" + std::to_string(count_) + (o ? "_" + std::to_string(o) : ""));
      n->add_output(out.back());
    }
    ++count_;
    attrs(n);
    return out;
  }
  template <class Attrs = void (*)(onnx::NodeProto*)>
  std::string node(
      const char* op, const std::vector<std::string>& in, Attrs attrs = [](onnx::NodeProto*) {}) {
    return nodes(op, in, 1, attrs)[0];
  }

  // Constant initializers: a float scalar, an int64 vector, a float or bool table.
  std::string scalar(float v) {
    onnx::TensorProto* t = constant_tensor(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
    return t->name();
  }
  std::string ints(std::initializer_list<int64_t> v) {
    onnx::TensorProto* t = constant_tensor(onnx::TensorProto::INT64);
    t->add_dims(int64_t(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return t->name();
  }
  std::string table(const std::vector<float>& v, int64_t rows, int64_t cols) {
    onnx::TensorProto* t = constant_tensor(onnx::TensorProto::FLOAT);
    t->add_dims(rows);
    t->add_dims(cols);
    t->set_raw_data(v.data(), v.size() * sizeof(float));
    return t->name();
  }
  onnx::TensorProto* constant_tensor(int type) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name("const_" + std::to_string(constants_++));
    t->set_data_type(type);
    return t;
  }

  // Rows [0, seq) of a [rows, …] tensor (seq: a [1] int64 tensor).
  std::string rows(const std::string& x, const std::string& seq) {
    return node("Slice", {x, ints({0}), seq, ints({0})});
  }
  // x·Wᵀ (+ b): hpctrain's weights are [out, in].
  std::string linear(const std::string& x, const std::string& weight, const std::string& bias) {
    const std::string w = node("Transpose", {init(weight)}, [](onnx::NodeProto* n) {
      attr_is(n, "perm", {1, 0});
    });
    const std::string y = node("MatMul", {x, w});
    return bias.empty() ? y : node("Add", {y, init(bias)});
  }
  std::string layernorm(const std::string& x, const std::string& gamma, const std::string& beta, double eps) {
    return node("LayerNormalization", {x, init(gamma), init(beta)}, [eps](onnx::NodeProto* n) {
      attr_i(n, "axis", -1);
      attr_f(n, "epsilon", float(eps));
    });
  }
  // weight · x / √(mean(x²) + eps)
  std::string rmsnorm(const std::string& x, const std::string& weight, double eps) {
    const std::string ms = node("ReduceMean", {node("Mul", {x, x})}, [](onnx::NodeProto* n) {
      attr_is(n, "axes", {-1});
      attr_i(n, "keepdims", 1);
    });
    const std::string rs = node("Div", {scalar(1.0f), node("Sqrt", {node("Add", {ms, scalar(float(eps))})})});
    return node("Mul", {init(weight), node("Mul", {x, rs})});
  }
  // GPT-2's tanh GELU: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
  std::string gelu(const std::string& x) {
    const std::string x3 = node("Mul", {node("Mul", {x, x}), x});
    const std::string inner = node("Mul", {node("Add", {x, node("Mul", {x3, scalar(0.044715f)})}),
                                           scalar(float(std::sqrt(2.0 / 3.14159265358979323846)))});
    return node("Mul", {node("Mul", {x, scalar(0.5f)}), node("Add", {node("Tanh", {inner}), scalar(1.0f)})});
  }
  std::string mlp_gelu(const std::string& x, const std::string& p) {
    return linear(gelu(linear(x, p + "fc.weight", p + "fc.bias")), p + "proj.weight", p + "proj.bias");
  }
  std::string mlp_swiglu(const std::string& x, const std::string& p) {
    const std::string gate = linear(x, p + "gate.weight", ""), up = linear(x, p + "up.weight", "");
    const std::string silu = node("Mul", {gate, node("Sigmoid", {gate})});
    return linear(node("Mul", {silu, up}), p + "down.weight", "");
  }

  struct Rotary {
    double theta = 0;
    kernels::RopeScaling scaling;
  };
  static Rotary rotary_of(const nn::LayerArgs& a, double default_theta) {
    Rotary r{named(a, "theta", default_theta), {}};
    if (a.named.count("linear")) {
      r.scaling.kind = kernels::RopeScaling::Kind::Linear;
      r.scaling.factor = a.named.at("linear");
    } else if (a.named.count("llama3")) {
      r.scaling = {kernels::RopeScaling::Kind::Llama3, a.named.at("llama3"), named(a, "low", 1),
                   named(a, "high", 4), named(a, "orig", 8192)};
    }
    return r;
  }

  // [B, S, n·d] → [B, n, S, d]
  std::string split_heads(const std::string& x, int64_t n, int64_t d) {
    const std::string r = node("Reshape", {x, ints({0, 0, n, d})});
    return node("Transpose", {r}, [](onnx::NodeProto* p) { attr_is(p, "perm", {0, 2, 1, 3}); });
  }
  // The rotate-half turn of [B, n, S, d] by the tables' rows [0, S).
  std::string rotate(const std::string& x, const std::string& cos, const std::string& sin, int64_t d) {
    const std::vector<std::string> halves =
        nodes("Split", {x, ints({d / 2, d / 2})}, 2, [](onnx::NodeProto* n) { attr_i(n, "axis", -1); });
    const std::string turned = node("Concat", {node("Neg", {halves[1]}), halves[0]},
                                    [](onnx::NodeProto* n) { attr_i(n, "axis", -1); });
    return node("Add", {node("Mul", {x, cos}), node("Mul", {turned, sin})});
  }

  std::string attention(const std::string& x, const std::string& p, int64_t heads, int64_t kv_heads,
                        bool bias, const Rotary& rot) {
    const int64_t d = params_.at(p + "proj.weight").first[1] / heads;
    std::string q, k, v;
    if (bias) {  // GPT-2's packed c_attn
      const std::string qkv = linear(x, p + "qkv.weight", p + "qkv.bias");
      const std::vector<std::string> parts =
          nodes("Split", {qkv, ints({heads * d, kv_heads * d, kv_heads * d})}, 3,
                [](onnx::NodeProto* n) { attr_i(n, "axis", -1); });
      q = parts[0], k = parts[1], v = parts[2];
    } else {
      q = linear(x, p + "q.weight", ""), k = linear(x, p + "k.weight", ""), v = linear(x, p + "v.weight", "");
    }
    q = split_heads(q, heads, d);
    k = split_heads(k, kv_heads, d);
    v = split_heads(v, kv_heads, d);
    if (rot.theta > 0) {
      std::vector<float> c(size_t(context_ * d)), s(size_t(context_ * d));
      for (int64_t pos = 0; pos < context_; ++pos)
        for (int64_t i = 0; i < d / 2; ++i) {
          const double angle = double(pos) * kernels::rotary_inv_freq(i, d, rot.theta, rot.scaling);
          c[size_t(pos * d + i)] = c[size_t(pos * d + i + d / 2)] = float(std::cos(angle));
          s[size_t(pos * d + i)] = s[size_t(pos * d + i + d / 2)] = float(std::sin(angle));
        }
      const std::string cos = rows(table(c, context_, d), seq_), sin = rows(table(s, context_, d), seq_);
      q = rotate(q, cos, sin, d);
      k = rotate(k, cos, sin, d);
    }
    if (kv_heads !=
        heads) {  // query head h reads kv head h / group: each kv head repeated group times in place
      const int64_t group = heads / kv_heads;
      auto repeat = [&](const std::string& t) {
        const std::string u = node("Unsqueeze", {t, ints({2})});
        const std::string r = node("Concat", std::vector<std::string>(size_t(group), u),
                                   [](onnx::NodeProto* n) { attr_i(n, "axis", 2); });
        return node("Reshape", {r, ints({0, heads, -1, d})});
      };
      k = repeat(k);
      v = repeat(v);
    }
    const std::string kt = node("Transpose", {k}, [](onnx::NodeProto* n) {
      attr_is(n, "perm", {0, 1, 3, 2});
    });
    const std::string scores =
        node("Mul", {node("MatMul", {q, kt}), scalar(float(1.0 / std::sqrt(double(d))))});
    const std::string seq2 = node("Concat", {seq_, seq_}, [](onnx::NodeProto* n) { attr_i(n, "axis", 0); });
    const std::string mask = node("Slice", {causal_mask(), ints({0, 0}), seq2, ints({0, 1})});
    const std::string masked = node("Where", {mask, scores, scalar(-INFINITY)});
    const std::string probs = node("Softmax", {masked}, [](onnx::NodeProto* n) { attr_i(n, "axis", -1); });
    const std::string o = node("Transpose", {node("MatMul", {probs, v})}, [](onnx::NodeProto* n) {
      attr_is(n, "perm", {0, 2, 1, 3});
    });
    return linear(node("Reshape", {o, ints({0, 0, heads * d})}), p + "proj.weight",
                  bias ? p + "proj.bias" : "");
  }
  // The context × context lower-triangular boolean table, made once.
  std::string causal_mask() {
    if (!mask_.empty()) return mask_;
    onnx::TensorProto* t = constant_tensor(onnx::TensorProto::BOOL);
    t->add_dims(context_);
    t->add_dims(context_);
    for (int64_t i = 0; i < context_; ++i)
      for (int64_t j = 0; j < context_; ++j) t->add_int32_data(j <= i ? 1 : 0);
    mask_ = t->name();
    return mask_;
  }

  onnx::GraphProto* g_;
  std::string what_;
  std::map<std::string, std::pair<Shape, const float*>> params_;
  std::set<std::string> added_;
  int count_ = 0, constants_ = 0;
  int64_t context_ = 0;
  std::string seq_, mask_;
};

void value_info(onnx::ValueInfoProto* v, const std::string& name, int type,
                const std::vector<std::string>& symbolic, const Shape& fixed) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  for (const std::string& s : symbolic) t->mutable_shape()->add_dim()->set_dim_param(s);
  for (int d = 0; d < fixed.rank(); ++d) t->mutable_shape()->add_dim()->set_dim_value(fixed[d]);
}

}  // namespace

std::string onnx_bytes(const ModelSource& src, const nn::Model& model, const std::string& what,
                       const std::vector<std::pair<std::string, std::string>>& metadata) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("hpctrain");
  m.set_producer_version(hpctrain_version());
  m.set_model_version(src.step);
  m.set_doc_string("hpctrain model: " + model.spec());
  onnx::OperatorSetIdProto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(ONNX_OPSET);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("hpctrain");
  Emitter e(g, src, model, what);
  const std::vector<nn::LayerArgs> layers = nn::parse_spec(model.spec());
  const bool language = !layers.empty() && layers.front().name == "embed";
  std::string x = language ? "input_ids" : "x";
  Shape shape = src.input_shape;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string prefix = std::to_string(i) + "." + layers[i].name + ".",
                      where = "layer " + std::to_string(i);
    x = language ? e.lm_layer(layers[i], prefix, x, where) : e.layer(layers[i], prefix, x, shape, where);
  }
  if (language) {
    value_info(g->add_input(), "input_ids", onnx::TensorProto::INT64, {"batch", "seq"},
               Shape(std::vector<int64_t>{}));
    value_info(g->add_output(), "logits", onnx::TensorProto::FLOAT, {"batch", "seq"},
               Shape{model.output_shape()[1]});
  } else {
    value_info(g->add_input(), "x", onnx::TensorProto::FLOAT, {"N"}, src.input_shape);
    value_info(g->add_output(), "logits", onnx::TensorProto::FLOAT, {"N"}, shape);
  }
  // The last node's output is renamed "logits".
  onnx::NodeProto* last = g->mutable_node(g->node_size() - 1);
  for (int i = 0; i < last->output_size(); ++i)
    if (last->output(i) == x) last->set_output(i, "logits");
  auto meta = [&](const std::string& k, const std::string& v) {
    onnx::StringStringEntryProto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  };
  meta("hpctrain_spec", model.spec());
  for (const auto& [k, v] : metadata) meta(k, v);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw UserError(what + ": the ONNX model could not be serialised");
  return bytes;
}

#endif

}  // namespace hpc::train
