// oneDNN convolutions (see onednn.h).
//
// One Plan per (batch, geometry, out channels, input and output layouts):
// the forward, backward-data and backward-weights primitives, created once
// with format_tag::any so that oneDNN picks its blocked layouts (nChw16c on
// AVX-512), the reorders between hpctrain's tensors and those layouts, and
// the buffers the blocked copies live in. Steady-state steps create and
// allocate nothing. hpctrain's activations come user (NCHW) or already
// channel-blocked (core/tensor.h: the layers between two convolutions keep
// oneDNN's layout, nn/layout.h), in which case no reorder is needed; the
// weights are user OIHW (the flat parameter buffer) and reordered per call.
// The backward-weights primitive writes its gradient into a buffer, which is
// then added to the flat gradient buffer: parameter gradients accumulate.
//
// Algorithm: per pass, Winograd F(4×4, 3×3) where it measured faster
// (winograd_pays: 3×3 stride-1 layers with ≥ 32 channels in and out; the
// weight gradient only with ≥ 64 on outputs that tile into 4×4 blocks;
// bench_cpu and docs/bench-results/cpu.md), direct convolution elsewhere and
// wherever this oneDNN has no Winograd kernel for the ISA (2.6 has AVX-512
// ones only). Not algorithm::convolution_auto: its choice is oneDNN's
// heuristic, which takes Winograd at 16 channels (slower) and never for the
// weight gradient (faster at 64). Winograd does fewer multiplications and
// rounds differently (the tests hold it to the lowering within float
// tolerance). And a 16-channel 3×3 layer's forward runs as its mirror's
// backward-data pass (mirrored_forward_pays), a faster kernel at that shape.
//
// Determinism: the algorithm is a function of the shape and the ISA, and
// oneDNN's f32 direct and Winograd kernels run a fixed schedule for a fixed
// shape, ISA and thread count (no atomics), so a run repeats bit for bit;
// tests/e2e/determinism.sh and test_onednn_conv check it.
#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/onednn.h"
#include "backend/cpu/switches.h"
#include "core/error.h"

namespace hpc::backend::cpu::onednn {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// hpctrain's tensor (`user`: its layout, NCHW or already channel-blocked) in the layout the
// primitive wants (`inner`): the reorder(s) and the buffer, or nothing when the layouts agree.
struct Staged {
  memory::desc user, inner;
  bool needed = false;
  std::unique_ptr<memory> buffer;
  dnnl::reorder to_inner, to_user;

  Staged() = default;
  Staged(const memory::desc& user_md, const memory::desc& inner_md, bool in, bool out)
      : user(user_md), inner(inner_md), needed(user_md != inner_md) {
    if (!needed) return;
    buffer = std::make_unique<memory>(inner, engine());
    if (in) to_inner = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), inner));
    if (out) to_user = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), inner, engine(), user));
  }
  // The memory the primitive reads: `data` itself, or it in the blocked layout.
  memory in(dnnl::stream& s, void* data) {
    memory mine(user, engine(), data);
    if (!needed) return mine;
    to_inner.execute(s, mine, *buffer);
    return *buffer;
  }
  // The memory the primitive writes; finish() moves it to `data`.
  memory out(void* data) { return needed ? *buffer : memory(user, engine(), data); }
  void finish(dnnl::stream& s, void* data) {
    if (!needed) return;
    memory mine(user, engine(), data);
    to_user.execute(s, *buffer, mine);
  }
};

struct Plan {
  dnnl::convolution_forward fwd;
  // The forward pass run as its mirror's backward-data pass (mirrored_forward_pays), with the
  // weights mirrored per call into mirror_weights (user OIHW of the mirror: [C, OC, k, k]).
  bool mirrored = false;
  dnnl::convolution_backward_data fwd_mirror;
  std::vector<float> mirror_weights;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  Staged f_src, f_wei, f_dst;             // forward
  Staged d_ddst, d_wei, d_dsrc;           // backward data
  Staged w_src, w_ddst, w_dwei;           // backward weights
  std::unique_ptr<memory> dweight_plain;  // the weight gradient before it is added
  int64_t weight_count = 0;
  std::string kernels;  // oneDNN's implementation of each pass, e.g. "forward jit_wino_4x3:avx512_core, …"
};

using Key =
    std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

// An activation's layout as a oneDNN tag: user NCHW or channel-blocked (core/tensor.h).
tag activation_tag(int64_t block) {
  switch (block) {
    case 0:
      return tag::nchw;
    case 8:
      return tag::nChw8c;
    case 16:
      return tag::nChw16c;
    default:
      throw Error(EXIT_INTERNAL, "oneDNN convolution: no layout for channel block " + std::to_string(block));
  }
}

enum class Pass { Forward, Data, Weights };

// Whether the algorithm choices below are on (HPCTRAIN_CPU_CONV_ALGO=direct: every pass direct).
bool algorithms_on() {
  static const bool on = !switched(Switch::ConvAlgo);
  return on;
}

dnnl::convolution_forward::primitive_desc forward_pd(dnnl::algorithm algo, const memory::desc& src,
                                                     const memory::desc& wei, const memory::desc& dst,
                                                     const memory::dims& strides, const memory::dims& pad) {
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src, wei, dst, strides, pad,
                                      pad),
      engine());
}

// Where Winograd F(4×4, 3×3) beat the direct kernels (AVX-512, one thread, batch 16 and 64, alone
// and inside resnet20's step): forward and data 1.3–1.9× at 32 and 64 channels, slower at 16. The
// weight gradient gains less and reads twice the data: 1.2× at 64 channels on 8×8, but slower in
// the step at 32 channels on 16×16 (faster alone, in cache) and on a 14×14 output (4×4 tiles that
// overhang it).
bool winograd_pays(const kernels::ConvShape& g, int64_t oc, Pass pass) {
  if (!algorithms_on() || g.kernel != 3 || g.stride != 1 || g.channels < 32 || oc < 32) return false;
  return pass != Pass::Weights || (g.channels >= 64 && oc >= 64 && g.out_h % 4 == 0 && g.out_w % 4 == 0);
}

// A stride-1 convolution whose padding keeps the size, y = x ⋆ W, is the backward-data pass of its
// mirror: the convolution of y-shaped inputs with W'[c][o] = W[o][c] turned 180°, x given as its
// output gradient. At 16 channels in and out oneDNN's direct forward kernel ran ~20% slower than
// its backward-data kernel on the same shape (1.85 against 1.50 ms per call in resnet20's step,
// batch 64); at 32 and 64 channels Winograd runs, and there the two are even.
bool mirrored_forward_pays(const kernels::ConvShape& g, int64_t oc) {
  return algorithms_on() && g.kernel == 3 && g.stride == 1 && g.pad == 1 && g.channels == 16 && oc == 16;
}

// W'[c][o][i][j] = W[o][c][k-1-i][k-1-j].
void mirror(const float* w, int64_t oc, int64_t c, int64_t k, float* to) {
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j)
          to[((ci * oc + o) * k + (k - 1 - i)) * k + (k - 1 - j)] = w[((o * c + ci) * k + i) * k + j];
}

// make(algorithm): Winograd when asked for and this oneDNN has it for the ISA, direct otherwise.
template <class Make>
auto with_algorithm(bool winograd, Make make) {
  if (winograd) {
    try {
      return make(dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
  }
  return make(dnnl::algorithm::convolution_direct);
}

Plan make_plan(int64_t batch, const kernels::ConvShape& g, int64_t oc, int64_t src_block, int64_t dst_block) {
  const memory::dims src{batch, g.channels, g.height, g.width}, wei{oc, g.channels, g.kernel, g.kernel},
      dst{batch, oc, g.out_h, g.out_w}, strides{g.stride, g.stride}, pad{g.pad, g.pad};
  const memory::desc src_any(src, dt::f32, tag::any), wei_any(wei, dt::f32, tag::any),
      dst_any(dst, dt::f32, tag::any);
  // "user": the layout of hpctrain's tensors (weights OIHW, activations as they come).
  const memory::desc src_user(src, dt::f32, activation_tag(src_block)), wei_user(wei, dt::f32, tag::oihw),
      dst_user(dst, dt::f32, activation_tag(dst_block));

  const auto fpd = with_algorithm(winograd_pays(g, oc, Pass::Forward), [&](dnnl::algorithm algo) {
    return forward_pd(algo, src_any, wei_any, dst_any, strides, pad);
  });
  const auto dpd = with_algorithm(winograd_pays(g, oc, Pass::Data), [&](dnnl::algorithm algo) {
    return dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(algo, src_any, wei_any, dst_any, strides, pad, pad), engine(),
        fpd);
  });
  const auto wpd = with_algorithm(winograd_pays(g, oc, Pass::Weights), [&](dnnl::algorithm algo) {
    return dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(algo, src_any, wei_any, dst_any, strides, pad, pad),
        engine(), fpd);
  });

  Plan p;
  std::string forward_kernel = fpd.impl_info_str();
  p.bwd_data = dnnl::convolution_backward_data(dpd);
  p.bwd_weights = dnnl::convolution_backward_weights(wpd);
  if (mirrored_forward_pays(g, oc)) {
    // The mirror: y-shaped input (its gradient is y), x-shaped output (its gradient is x).
    const memory::dims mwei{g.channels, oc, g.kernel, g.kernel};
    const memory::desc mwei_any(mwei, dt::f32, tag::any), mwei_user(mwei, dt::f32, tag::oihw);
    const auto hint =
        forward_pd(dnnl::algorithm::convolution_direct, dst_any, mwei_any, src_any, strides, pad);
    const dnnl::convolution_backward_data::primitive_desc mpd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, dst_any, mwei_any, src_any,
                                              strides, pad, pad),
        engine(), hint);
    p.mirrored = true;
    p.fwd_mirror = dnnl::convolution_backward_data(mpd);
    p.mirror_weights.resize(static_cast<size_t>(oc * g.col_rows()));
    p.f_src = Staged(src_user, mpd.diff_dst_desc(), true, false);
    p.f_wei = Staged(mwei_user, mpd.weights_desc(), true, false);
    p.f_dst = Staged(dst_user, mpd.diff_src_desc(), false, true);
    forward_kernel = std::string("(mirrored backward data) ") + mpd.impl_info_str();
  } else {
    p.fwd = dnnl::convolution_forward(fpd);
    p.f_src = Staged(src_user, fpd.src_desc(), true, false);
    p.f_wei = Staged(wei_user, fpd.weights_desc(), true, false);
    p.f_dst = Staged(dst_user, fpd.dst_desc(), false, true);
  }
  p.kernels =
      "forward " + forward_kernel + ", data " + dpd.impl_info_str() + ", weights " + wpd.impl_info_str();
  p.d_ddst = Staged(dst_user, dpd.diff_dst_desc(), true, false);
  p.d_wei = Staged(wei_user, dpd.weights_desc(), true, false);
  p.d_dsrc = Staged(src_user, dpd.diff_src_desc(), false, true);
  p.w_src = Staged(src_user, wpd.src_desc(), true, false);
  p.w_ddst = Staged(dst_user, wpd.diff_dst_desc(), true, false);
  p.w_dwei = Staged(wei_user, wpd.diff_weights_desc(), false, true);
  p.dweight_plain = std::make_unique<memory>(wei_user, engine());
  p.weight_count = oc * g.col_rows();
  return p;
}

// The plans of this process. Layers call convolutions from the trainer's thread; the lock keeps
// a second caller (tests, sample) safe.
Plan& plan_for(const Tensor& x, const kernels::ConvShape& g, int64_t oc, const Tensor& y) {
  static std::mutex mutex;
  static std::map<Key, Plan> plans;
  const std::lock_guard<std::mutex> lock(mutex);
  const int64_t batch = x.shape()[0], src_block = x.channel_block(), dst_block = y.channel_block();
  const Key key{batch, g.channels, g.height, g.width, g.kernel, g.stride, g.pad, oc, src_block, dst_block};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(batch, g, oc, src_block, dst_block)).first;
  return it->second;
}

int64_t out_channels(const Tensor& weight, const kernels::ConvShape& g) {
  return weight.count() / g.col_rows();
}

template <class F>
void library_call(const char* what, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    throw Error(EXIT_INTERNAL, std::string("oneDNN ") + what + " failed: " + e.what());
  }
}

// Whether Winograd is on and this oneDNN has it for the CPU's ISA (asked on a layer it pays for).
bool winograd_runs() {
  static const bool runs = [] {
    const auto g = kernels::ConvShape::make(1, 32, 8, 8, 3, 1, 1);
    if (!winograd_pays(g, 32, Pass::Forward)) return false;
    const memory::desc act({1, 32, 8, 8}, dt::f32, tag::any), wei({32, 32, 3, 3}, dt::f32, tag::any);
    try {
      const auto pd = forward_pd(dnnl::algorithm::convolution_winograd, act, wei, act, {1, 1}, {1, 1});
      return std::string(pd.impl_info_str()).find("wino") != std::string::npos;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return runs;
}

}  // namespace

bool enabled() {
  static const bool on = !switched(Switch::Conv);
  return on;
}

int64_t channel_block() {
  static const int64_t block = [] {
    if (!enabled() || switched(Switch::Layout)) return int64_t{0};
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx512_core:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_amx:
        return int64_t{16};
      case dnnl::cpu_isa::avx2:
      case dnnl::cpu_isa::avx2_vnni:
        return int64_t{8};
      default:
        return int64_t{0};
    }
  }();
  return block;
}

std::string describe() {
  const dnnl_version_t* v = dnnl_version();
  std::string s =
      "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  if (!enabled()) return s + " off (HPCTRAIN_CPU_CONV=lowering): convolutions lowered to GEMM";
  const char* isa = "?";
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      isa = "SSE4.1";
      break;
    case dnnl::cpu_isa::avx:
      isa = "AVX";
      break;
    case dnnl::cpu_isa::avx2:
      isa = "AVX2";
      break;
    case dnnl::cpu_isa::avx512_core:
      isa = "AVX-512";
      break;
    case dnnl::cpu_isa::avx512_core_vnni:
      isa = "AVX-512 VNNI";
      break;
    case dnnl::cpu_isa::avx512_core_bf16:
      isa = "AVX-512 BF16";
      break;
    case dnnl::cpu_isa::avx512_core_amx:
      isa = "AVX-512 AMX";
      break;
    default:
      isa = "other";
      break;
  }
  const int64_t block = channel_block();
  return s + " (ISA " + isa + "): convolutions" +
         (block ? ", activations kept in nChw" + std::to_string(block) + "c between them" : "") +
         (winograd_runs() ? "; Winograd F(4x4,3x3) for 3x3 stride-1 layers with >= 32 channels" : "");
}

std::string implementations(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g,
                            const Tensor& y) {
  std::string s;
  library_call("convolution set-up", [&] { s = plan_for(x, g, out_channels(weight, g), y).kernels; });
  return s;
}

bool takes(const Tensor& x, const Tensor& weight, const Tensor& y) {
  return enabled() && x.device() == Device::CPU && x.dtype() == DType::F32 && weight.dtype() == DType::F32 &&
         y.dtype() == DType::F32;
}

void convolve(const Tensor& x, const Tensor& weight, const kernels::ConvShape& g, const Tensor& y) {
  library_call("convolution forward", [&] {
    Plan& p = plan_for(x, g, out_channels(weight, g), y);
    dnnl::stream s(engine());
    memory src = p.f_src.in(s, x.raw()), dst = p.f_dst.out(y.raw());
    if (p.mirrored) {
      mirror(weight.data<float>(), out_channels(weight, g), g.channels, g.kernel, p.mirror_weights.data());
      memory wei = p.f_wei.in(s, p.mirror_weights.data());
      p.fwd_mirror.execute(s, {{DNNL_ARG_DIFF_DST, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dst}});
    } else {
      memory wei = p.f_wei.in(s, weight.raw());
      p.fwd.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    }
    p.f_dst.finish(s, y.raw());
    s.wait();
  });
}

void convolve_backward(const Tensor& x, const Tensor& weight, const Tensor& dy, const kernels::ConvShape& g,
                       const Tensor& dweight, const Tensor& dx) {
  library_call("convolution backward", [&] {
    HPC_ASSERT(!dx.defined() || dx.channel_block() == x.channel_block(),
               "convolution: dx's layout is not x's");
    Plan& p = plan_for(x, g, out_channels(weight, g), dy);
    dnnl::stream s(engine());
    {
      memory src = p.w_src.in(s, x.raw()), ddst = p.w_ddst.in(s, dy.raw());
      memory dwei = p.w_dwei.needed ? *p.w_dwei.buffer : *p.dweight_plain;
      p.bwd_weights.execute(s,
                            {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei}});
      if (p.w_dwei.needed) p.w_dwei.to_user.execute(s, dwei, *p.dweight_plain);
    }
    if (dx.defined()) {
      // dy in the blocked layout once for both halves when they want the same one (they do on AVX-512).
      const bool shared = p.d_ddst.needed && p.w_ddst.needed && p.d_ddst.inner == p.w_ddst.inner;
      memory ddst = shared ? *p.w_ddst.buffer : p.d_ddst.in(s, dy.raw());
      memory wei = p.d_wei.in(s, weight.raw()), dsrc = p.d_dsrc.out(dx.raw());
      p.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc}});
      p.d_dsrc.finish(s, dx.raw());
    }
    s.wait();
    const float* from = static_cast<const float*>(p.dweight_plain->get_data_handle());
    float* to = dweight.data<float>();
    for (int64_t i = 0; i < p.weight_count; ++i) to[i] += from[i];
  });
}

void set_threads(int threads) { omp_set_num_threads(threads); }

}  // namespace hpc::backend::cpu::onednn
