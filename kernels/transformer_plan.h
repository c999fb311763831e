// The GPU attention op as a list of steps: cuBLAS strided-batched GEMMs on
// views of the packed [q | k | v] rows and the causal-softmax row kernels.
// Host-only plain C++: the CUDA op (backend/cuda/transformer_ops.cpp)
// executes the steps with cuBLAS and kernels/transformer.cuh, and
// test_kernels_emulated executes the same steps on the CPU with a
// column-major GEMM that follows cuBLAS's definition, so every leading
// dimension, batch stride, offset and transposition is checked against the
// CPU op without a GPU.
//
// Per (sample b, head h), with d = C/heads, as the CPU op does it:
//   forward   S = Q·Kᵀ/√d → causal softmax in place → O = P·V
//   backward  dP = dO·Vᵀ, dV = Pᵀ·dO, dS = P ⊙ (dP − Σ P·dP), dQ = dS·K/√d, dK = dSᵀ·Q/√d
// The (b, h) pairs do not sit at one constant stride (heads are d columns
// apart, samples T·3C), so each GEMM is a loop over the smaller of
// samples and heads with a strided batch over the larger one. Backward keeps
// dP/dS of one such batch in scratch (attention_scratch_count elements).
#pragma once

#include <cstdint>
#include <vector>

namespace hpc::kernels {

enum class AttnBuf { Qkv, Probs, Out, Dout, Dqkv, Scratch };

// Batch entry z of an operand starts at offset + z·batch_stride of its buffer.
struct AttnOperand {
  AttnBuf buf;
  int64_t offset, ld, batch_stride;
};

// Column-major (cuBLAS's convention): C[m×n] = alpha·op(A)·op(B) + beta·C per batch entry.
struct CublasGemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  double alpha, beta;
  AttnOperand a, b, c;
  int64_t batch;
};

// Rows of `batch` T×T matrices: row t of entry z at offset + z·batch_stride + t·ld.
struct SoftmaxRows {
  AttnOperand p, dp;
  int64_t batch, t_len;
};

struct AttnStep {
  enum class Kind { Gemm, SoftmaxForward, SoftmaxBackward } kind;
  CublasGemm matmul;
  SoftmaxRows rows;
};

struct AttnShape {
  int64_t samples, heads, t_len, width;
};

namespace attn_detail {

// A row-major product C = alpha·op(A)·op(B) + beta·C (the CPU op's gemm_ld)
// as cuBLAS sees the same memory: Cᵀ = op(B)ᵀ·op(A)ᵀ, B first.
inline AttnStep gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, AttnOperand a,
                     AttnOperand b, AttnOperand c, int64_t batch) {
  AttnStep s{AttnStep::Kind::Gemm, {tb, ta, n, m, k, alpha, 0.0, b, a, c, batch}, {}};
  return s;
}

// Offsets of (b, h) and strides along the batched index, for outer iteration o.
struct Layout {
  int64_t t, c, d, heads;
  bool loop_samples;  // true: loop over samples, batch over heads
  int64_t q(int64_t b, int64_t h) const { return b * t * 3 * c + h * d; }
  int64_t probs(int64_t b, int64_t h) const { return (b * heads + h) * t * t; }
  int64_t out(int64_t b, int64_t h) const { return b * t * c + h * d; }
  int64_t qkv_stride() const { return loop_samples ? d : t * 3 * c; }
  int64_t probs_stride() const { return loop_samples ? t * t : heads * t * t; }
  int64_t out_stride() const { return loop_samples ? d : t * c; }
};

inline Layout layout_of(const AttnShape& s) {
  return {s.t_len, s.width, s.width / s.heads, s.heads, s.samples <= s.heads};
}

}  // namespace attn_detail

// Batch entries per GEMM call (the larger of samples and heads) and the number of calls per GEMM.
inline int64_t attention_batch(const AttnShape& s) { return s.samples <= s.heads ? s.heads : s.samples; }
inline int64_t attention_loops(const AttnShape& s) { return s.samples <= s.heads ? s.samples : s.heads; }
// Elements of scratch the backward plan uses (dP/dS of one batch of T×T matrices).
inline int64_t attention_scratch_count(const AttnShape& s) { return attention_batch(s) * s.t_len * s.t_len; }

inline std::vector<AttnStep> attention_forward_plan(const AttnShape& s, double scale) {
  using attn_detail::gemm;
  const attn_detail::Layout l = attn_detail::layout_of(s);
  const int64_t t = s.t_len, c = s.width, d = l.d, nb = attention_batch(s);
  std::vector<AttnStep> steps;
  for (int64_t o = 0; o < attention_loops(s); ++o) {  // S = Q·Kᵀ·scale
    const int64_t b = l.loop_samples ? o : 0, h = l.loop_samples ? 0 : o;
    steps.push_back(gemm(false, true, t, t, d, scale, {AttnBuf::Qkv, l.q(b, h), 3 * c, l.qkv_stride()},
                         {AttnBuf::Qkv, l.q(b, h) + c, 3 * c, l.qkv_stride()},
                         {AttnBuf::Probs, l.probs(b, h), t, l.probs_stride()}, nb));
  }
  AttnStep softmax{AttnStep::Kind::SoftmaxForward, {}, {}};
  softmax.rows = {{AttnBuf::Probs, 0, t, t * t}, {AttnBuf::Probs, 0, t, t * t}, s.samples * s.heads, t};
  steps.push_back(softmax);
  for (int64_t o = 0; o < attention_loops(s); ++o) {  // O = P·V
    const int64_t b = l.loop_samples ? o : 0, h = l.loop_samples ? 0 : o;
    steps.push_back(gemm(false, false, t, d, t, 1.0, {AttnBuf::Probs, l.probs(b, h), t, l.probs_stride()},
                         {AttnBuf::Qkv, l.q(b, h) + 2 * c, 3 * c, l.qkv_stride()},
                         {AttnBuf::Out, l.out(b, h), c, l.out_stride()}, nb));
  }
  return steps;
}

inline std::vector<AttnStep> attention_backward_plan(const AttnShape& s, double scale) {
  using attn_detail::gemm;
  const attn_detail::Layout l = attn_detail::layout_of(s);
  const int64_t t = s.t_len, c = s.width, d = l.d, nb = attention_batch(s);
  const AttnOperand scratch{AttnBuf::Scratch, 0, t, t * t};
  std::vector<AttnStep> steps;
  for (int64_t o = 0; o < attention_loops(s); ++o) {
    const int64_t b = l.loop_samples ? o : 0, h = l.loop_samples ? 0 : o;
    const AttnOperand q{AttnBuf::Qkv, l.q(b, h), 3 * c, l.qkv_stride()};
    const AttnOperand k{AttnBuf::Qkv, l.q(b, h) + c, 3 * c, l.qkv_stride()};
    const AttnOperand v{AttnBuf::Qkv, l.q(b, h) + 2 * c, 3 * c, l.qkv_stride()};
    const AttnOperand p{AttnBuf::Probs, l.probs(b, h), t, l.probs_stride()};
    const AttnOperand dout{AttnBuf::Dout, l.out(b, h), c, l.out_stride()};
    const AttnOperand dq{AttnBuf::Dqkv, l.q(b, h), 3 * c, l.qkv_stride()};
    const AttnOperand dk{AttnBuf::Dqkv, l.q(b, h) + c, 3 * c, l.qkv_stride()};
    const AttnOperand dv{AttnBuf::Dqkv, l.q(b, h) + 2 * c, 3 * c, l.qkv_stride()};
    steps.push_back(gemm(false, true, t, t, d, 1.0, dout, v, scratch, nb));  // dP = dO·Vᵀ
    steps.push_back(gemm(true, false, t, d, t, 1.0, p, dout, dv, nb));       // dV = Pᵀ·dO
    AttnStep softmax{AttnStep::Kind::SoftmaxBackward, {}, {}};
    softmax.rows = {p, scratch, nb, t};
    steps.push_back(softmax);                                                 // dS in dP's place
    steps.push_back(gemm(false, false, t, d, t, scale, scratch, k, dq, nb));  // dQ = dS·K·scale
    steps.push_back(gemm(true, false, t, d, t, scale, scratch, q, dk, nb));   // dK = dSᵀ·Q·scale
  }
  return steps;
}

}  // namespace hpc::kernels
