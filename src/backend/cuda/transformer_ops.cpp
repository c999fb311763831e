// CUDA transformer ops (ops.def): shape checks, scratch, and the
// calls into kernels/transformer.cuh and cuBLAS. Same contracts as the CPU
// ops (backend/cpu/transformer_ops.cpp), with these GPU-side choices:
//
// - Token ids may come in any float dtype or int32, independent of the
//   weights' dtype. They become int32 keys on the device; forward reads back
//   the index of the first bad id (one 8-byte read, so forward waits for the
//   GPU once) and throws the CPU op's UserError for it. An id that a 16-bit
//   dtype cannot carry exactly (≥ 256 in bfloat16, ≥ 2048 in float16) is
//   refused the same way instead of silently reading another token's row.
// - Attention is the CPU's algorithm with cuBLAS strided-batched GEMMs
//   (kernels/transformer_plan.h) and our causal-softmax kernels; the T×T
//   probabilities are kept for backward as on the CPU. cuDNN's fused
//   attention is not used: it keeps no probabilities (the layer's saved
//   state and activation accounting assume them) and its graph API is a
//   separate frontend library this build does not ship.
// - Backward's dP/dS buffer is one batch of T×T matrices from the context's
//   scratch, not the caller's T×T `scratch` tensor (the CPU's per-(b, h) buffer).
// - GEMM precision as in core_ops.cpp: true fp32, fp32 accumulation for 16-bit, fp64 for fp64.
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/transformer.cuh"
#include "kernels/transformer_math.h"
#include "kernels/transformer_plan.h"

namespace hpc::backend::cuda {

namespace {

// Calls f.template operator()<I>() with the storage type of a token-id tensor.
template <typename F>
void dispatch_ids(DType dtype, F&& f) {
  if (dtype == DType::I32) return f.template operator()<int32_t>();
  dispatch_storage(dtype, "embedding (token ids)", std::forward<F>(f));
}

constexpr size_t SCRATCH_ALIGN = 256;
size_t aligned(size_t bytes) { return (bytes + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN; }

struct EmbeddingShape {
  int64_t width, vocab, tokens, t_len;
};

EmbeddingShape embedding_shape(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const char* op) {
  const EmbeddingShape s{wte.shape()[1], wte.shape()[0], ids.count(),
                         ids.shape().rank() > 1 ? ids.shape()[1] : ids.count()};
  HPC_ASSERT((!wpe.defined() || (wpe.shape()[1] == s.width && wpe.shape()[0] >= s.t_len)) && s.t_len > 0 &&
                 s.tokens % s.t_len == 0,
             std::string(op) + ": shapes");
  HPC_ASSERT(s.vocab < INT32_MAX && s.tokens < INT32_MAX, std::string(op) + ": sizes past int32");
  return s;
}

// The CPU op's message for the bad id at index `bad`, or the 16-bit one.
[[noreturn]] void throw_bad_token(const Tensor& ids, int64_t bad, int64_t vocab) {
  // The one element, read back and widened on the host.
  double v = 0;
  dispatch_ids(ids.dtype(), [&]<typename T>() {
    T host{};
    cudaCheck(cudaMemcpy(&host, static_cast<const T*>(ids.raw()) + bad, sizeof(T), cudaMemcpyDeviceToHost));
    v = static_cast<double>(host);
  });
  const bool exact_in_range = v >= 0 && v < double(vocab) && v == std::floor(v);
  if (exact_in_range && (ids.dtype() == DType::BF16 || ids.dtype() == DType::F16))
    throw UserError("token id " + std::to_string(int64_t(v)) + " at position " + std::to_string(bad) +
                    " of the batch reached the GPU in " + dtype_name(ids.dtype()) +
                    ", which holds token ids exactly only below " +
                    (ids.dtype() == DType::BF16 ? "256" : "2048") +
                    ": train models with a larger vocabulary in fp32 (--train.precision fp32)");
  throw UserError("token " + std::to_string(v) + " at position " + std::to_string(bad) +
                  " of the batch is not an id in the model's vocabulary [0, " + std::to_string(vocab) + ")");
}

int as_int(int64_t v) {
  HPC_ASSERT(v >= 0 && v <= INT_MAX, "attention (CUDA): size " + std::to_string(v) + " past cuBLAS's int");
  return static_cast<int>(v);
}

// The device buffers a plan's steps name.
struct AttnBuffers {
  void* qkv = nullptr;
  void* probs = nullptr;
  void* out = nullptr;
  void* dout = nullptr;
  void* dqkv = nullptr;
  void* scratch = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  size_t elem = 0;
  void* at(const kernels::AttnOperand& o) const {
    void* base = nullptr;
    switch (o.buf) {
      case kernels::AttnBuf::Qkv:
        base = qkv;
        break;
      case kernels::AttnBuf::Probs:
        base = probs;
        break;
      case kernels::AttnBuf::Out:
        base = out;
        break;
      case kernels::AttnBuf::Dout:
        base = dout;
        break;
      case kernels::AttnBuf::Dqkv:
        base = dqkv;
        break;
      case kernels::AttnBuf::Scratch:
        base = scratch;
        break;
      case kernels::AttnBuf::KCache:
        base = k_cache;
        break;
      case kernels::AttnBuf::VCache:
        base = v_cache;
        break;
    }
    HPC_ASSERT(base != nullptr, "attention (CUDA): a plan step names a buffer this op has not");
    return static_cast<char*>(base) + static_cast<size_t>(o.offset) * elem;
  }
};

void run_gemm(const kernels::CublasGemm& g, const AttnBuffers& buf, DType dtype) {
  const cudaDataType_t type = cuda_data_type(dtype, "attention");
  cublasHandle_t h = Context::get().cublas();
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dtype == DType::F64) {
    cublasCheck(cublas_api().gemm_strided_batched_ex(
        h, op_a, op_b, as_int(g.m), as_int(g.n), as_int(g.k), &g.alpha, buf.at(g.a), type, as_int(g.a.ld),
        g.a.batch_stride, buf.at(g.b), type, as_int(g.b.ld), g.b.batch_stride, &g.beta, buf.at(g.c), type,
        as_int(g.c.ld), g.c.batch_stride, as_int(g.batch), CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT));
  } else {
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    cublasCheck(cublas_api().gemm_strided_batched_ex(
        h, op_a, op_b, as_int(g.m), as_int(g.n), as_int(g.k), &alpha, buf.at(g.a), type, as_int(g.a.ld),
        g.a.batch_stride, buf.at(g.b), type, as_int(g.b.ld), g.b.batch_stride, &beta, buf.at(g.c), type,
        as_int(g.c.ld), g.c.batch_stride, as_int(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

template <typename T>
void run_plan(const std::vector<kernels::AttnStep>& steps, const AttnBuffers& buf) {
  cudaStream_t s = Context::get().compute();
  for (const kernels::AttnStep& step : steps) {
    const kernels::SoftmaxRows& r = step.rows;
    switch (step.kind) {
      case kernels::AttnStep::Kind::Gemm:
        run_gemm(step.matmul, buf, dtype_of<T>());
        break;
      case kernels::AttnStep::Kind::SoftmaxForward:
        HPC_ASSERT(r.p.ld == r.t_len, "attention (CUDA): softmax rows must be contiguous");
        kernels::causal_softmax_forward(static_cast<T*>(buf.at(r.p)), r.batch, r.p.batch_stride,
                                        r.row_count(), r.t_len, r.offset, s);
        break;
      case kernels::AttnStep::Kind::Copy: {
        const kernels::RowCopy& c = step.row_copy;
        cudaCheck(cudaMemcpy2DAsync(buf.at(c.dst), size_t(c.dst.ld) * sizeof(T), buf.at(c.src),
                                    size_t(c.src.ld) * sizeof(T), size_t(c.cols) * sizeof(T), size_t(c.rows),
                                    cudaMemcpyDeviceToDevice, s));
        break;
      }
      case kernels::AttnStep::Kind::SoftmaxBackward:
        HPC_ASSERT(r.p.ld == r.t_len && r.dp.ld == r.t_len,
                   "attention (CUDA): softmax rows must be contiguous");
        kernels::causal_softmax_backward(static_cast<const T*>(buf.at(r.p)), r.p.batch_stride,
                                         static_cast<T*>(buf.at(r.dp)), r.dp.batch_stride, r.batch, r.t_len,
                                         s);
        break;
    }
  }
}

kernels::AttnShape attn_shape(const Tensor& qkv, int64_t heads, int64_t kv_heads, const char* op) {
  HPC_ASSERT(heads > 0 && kv_heads > 0 && heads % kv_heads == 0,
             std::string(op) + ": heads not a multiple of kv_heads");
  const int64_t w = qkv.shape()[2], d = w / (heads + 2 * kv_heads);
  HPC_ASSERT(d > 0 && w == (heads + 2 * kv_heads) * d, std::string(op) + ": qkv width");
  kernels::AttnShape s{qkv.shape()[0], heads, qkv.shape()[1], heads * d};
  s.kv_heads = kv_heads;
  return s;
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe, const Tensor& y) {
  require_device("embedding_forward", {&ids, &wte, &wpe, &y});
  const EmbeddingShape s = embedding_shape(ids, wte, wpe, "embedding_forward");
  HPC_ASSERT(y.count() == s.tokens * s.width, "embedding_forward: shapes");
  Context& ctx = Context::get();
  cudaStream_t stream = ctx.compute();
  char* scratch =
      static_cast<char*>(ctx.scratch(SCRATCH_ALIGN + aligned(size_t(s.tokens) * sizeof(int32_t))));
  auto* first_bad = reinterpret_cast<unsigned long long*>(scratch);
  auto* keys = reinterpret_cast<int32_t*>(scratch + SCRATCH_ALIGN);
  dispatch_ids(ids.dtype(), [&]<typename I>() {
    kernels::token_keys(ptr<I>(ids, "embedding_forward"), s.tokens, s.vocab, keys, first_bad, stream);
  });
  unsigned long long bad = 0;
  std::memcpy(&bad, ctx.read_back(first_bad, sizeof bad), sizeof bad);
  if (bad != ~0ull) throw_bad_token(ids, static_cast<int64_t>(bad), s.vocab);
  dispatch_storage(y.dtype(), "embedding_forward", [&]<typename T>() {
    kernels::embedding_forward(keys, ptr<T>(wte, "embedding_forward"), ptr<T>(wpe, "embedding_forward"),
                               ptr<T>(y, "embedding_forward"), s.tokens, s.t_len, s.width, s.vocab, stream);
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, const Tensor& dwpe) {
  require_device("embedding_backward", {&ids, &dy, &dwte, &dwpe});
  const EmbeddingShape s = embedding_shape(ids, dwte, dwpe, "embedding_backward");
  HPC_ASSERT(dy.count() == s.tokens * s.width, "embedding_backward: shapes");
  Context& ctx = Context::get();
  cudaStream_t stream = ctx.compute();
  const size_t part = aligned(size_t(s.tokens) * sizeof(int32_t));
  char* scratch = static_cast<char*>(ctx.scratch(3 * part));
  auto* keys = reinterpret_cast<int32_t*>(scratch);
  auto* sorted_key = reinterpret_cast<int32_t*>(scratch + part);
  auto* sorted_pos = reinterpret_cast<int32_t*>(scratch + 2 * part);
  // Forward refused bad ids; here they would only be skipped (key = vocab).
  dispatch_ids(ids.dtype(), [&]<typename I>() {
    kernels::token_keys(ptr<I>(ids, "embedding_backward"), s.tokens, s.vocab, keys, nullptr, stream);
  });
  dispatch_storage(dy.dtype(), "embedding_backward", [&]<typename T>() {
    kernels::embedding_backward(keys, sorted_key, sorted_pos, ptr<T>(dy, "embedding_backward"),
                                ptr<T>(dwte, "embedding_backward"), ptr<T>(dwpe, "embedding_backward"),
                                s.tokens, s.t_len, s.width, s.vocab, stream);
  });
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  require_device("layernorm_forward", {&x, &gamma, &beta, &y, &mean, &rstd});
  const int64_t c = gamma.count(), rows = x.count() / c;
  HPC_ASSERT(y.count() == x.count() && mean.count() >= rows && rstd.count() >= rows, "layernorm: shapes");
  dispatch_storage(y.dtype(), "layernorm_forward", [&]<typename T>() {
    const char* op = "layernorm_forward";
    kernels::layernorm_forward(ptr<T>(x, op), ptr<T>(gamma, op), ptr<T>(beta, op), eps, ptr<T>(y, op),
                               ptr<T>(mean, op), ptr<T>(rstd, op), rows, c, Context::get().compute());
  });
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, bool accumulate, const Tensor& dgamma,
                        const Tensor& dbeta) {
  require_device("layernorm_backward", {&x, &dy, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta});
  const int64_t c = gamma.count(), rows = x.count() / c;
  HPC_ASSERT(dy.count() == x.count() && (!dx.defined() || dx.count() == x.count()) && mean.count() >= rows &&
                 rstd.count() >= rows,
             "layernorm: shapes");
  Context& ctx = Context::get();
  auto* partials =
      static_cast<double*>(ctx.scratch(2 * size_t(kernels::layernorm_param_splits(rows)) * size_t(c) * 8));
  dispatch_storage(dy.dtype(), "layernorm_backward", [&]<typename T>() {
    const char* op = "layernorm_backward";
    kernels::layernorm_backward(ptr<T>(x, op), ptr<T>(dy, op), ptr<T>(gamma, op), ptr<T>(mean, op),
                                ptr<T>(rstd, op), ptr<T>(dx, op), accumulate, ptr<T>(dgamma, op),
                                ptr<T>(dbeta, op), partials, rows, c, ctx.compute());
  });
}

void attention_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& probs,
                       const Tensor& out) {
  require_device("attention_forward", {&qkv, &probs, &out});
  const kernels::AttnShape s = attn_shape(qkv, heads, kv_heads, "attention_forward");
  HPC_ASSERT(
      out.count() == s.samples * s.t_len * s.width && probs.count() >= s.samples * heads * s.t_len * s.t_len,
      "attention_forward: shapes");
  dispatch_storage(out.dtype(), "attention_forward", [&]<typename T>() {
    AttnBuffers buf;
    buf.qkv = ptr<T>(qkv, "attention_forward");
    buf.probs = ptr<T>(probs, "attention_forward");
    buf.out = ptr<T>(out, "attention_forward");
    buf.elem = sizeof(T);
    run_plan<T>(kernels::attention_forward_plan(s, 1.0 / std::sqrt(double(s.d()))), buf);
  });
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t heads,
                        int64_t kv_heads, const Tensor& dqkv, const Tensor& scratch) {
  require_device("attention_backward", {&qkv, &probs, &dout, &dqkv, &scratch});
  const kernels::AttnShape s = attn_shape(qkv, heads, kv_heads, "attention_backward");
  HPC_ASSERT(dqkv.count() == qkv.count() && dout.count() == s.samples * s.t_len * s.width &&
                 probs.count() >= s.samples * heads * s.t_len * s.t_len,
             "attention_backward: shapes");
  dispatch_storage(dqkv.dtype(), "attention_backward", [&]<typename T>() {
    AttnBuffers buf;
    buf.qkv = ptr<T>(qkv, "attention_backward");
    buf.probs = ptr<T>(probs, "attention_backward");
    buf.dout = ptr<T>(dout, "attention_backward");
    buf.dqkv = ptr<T>(dqkv, "attention_backward");
    buf.scratch = Context::get().scratch(size_t(kernels::attention_scratch_count(s)) * sizeof(T));
    buf.elem = sizeof(T);
    run_plan<T>(kernels::attention_backward_plan(s, 1.0 / std::sqrt(double(s.d()))), buf);
  });
}

void attention_decode(const Tensor& qkv, int64_t heads, int64_t kv_heads, const Tensor& k_cache,
                      const Tensor& v_cache, int64_t pos, const Tensor& out) {
  require_device("attention_decode", {&qkv, &k_cache, &v_cache, &out});
  const kernels::AttnShape s = attn_shape(qkv, heads, kv_heads, "attention_decode");
  const int64_t n = s.t_len, d = s.d();
  HPC_ASSERT(s.samples == 1 && out.count() == n * s.width && k_cache.shape()[1] == kv_heads * d &&
                 v_cache.shape() == k_cache.shape() && k_cache.shape()[0] >= pos + n && pos >= 0,
             "attention_decode: shapes");
  dispatch_storage(out.dtype(), "attention_decode", [&]<typename T>() {
    AttnBuffers buf;
    buf.qkv = ptr<T>(qkv, "attention_decode");
    buf.k_cache = ptr<T>(k_cache, "attention_decode");
    buf.v_cache = ptr<T>(v_cache, "attention_decode");
    buf.out = ptr<T>(out, "attention_decode");
    buf.scratch = Context::get().scratch(size_t(kernels::attention_decode_scratch_count(n, pos)) * sizeof(T));
    buf.elem = sizeof(T);
    run_plan<T>(kernels::attention_decode_plan(heads, kv_heads, d, n, pos, 1.0 / std::sqrt(double(d))), buf);
  });
}

}  // namespace hpc::backend::cuda
