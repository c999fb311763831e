// The GPU attention op as a list of steps: cuBLAS strided-batched GEMMs on
// views of the packed [q | k | v] rows and the causal-softmax row kernels.
// Host-only plain C++: the CUDA op (backend/cuda/transformer_ops.cpp)
// executes the steps with cuBLAS and kernels/transformer.cuh, and
// test_kernels_emulated executes the same steps on the CPU with a
// column-major GEMM that follows cuBLAS's definition, so every leading
// dimension, batch stride, offset and transposition is checked against the
// CPU op without a GPU.
//
// Per (sample b, head h), with head h's keys and values those of kv head
// h / (heads / kv_heads) (grouped-query attention), as the CPU op does it:
//   forward   S = Q·Kᵀ/√d → causal softmax in place → O = P·V
//   backward  dP = dO·Vᵀ, dV = Pᵀ·dO, dS = P ⊙ (dP − Σ P·dP), dQ = dS·K/√d, dK = dSᵀ·Q/√d
// The (b, h) pairs do not sit at one constant stride (heads are d columns
// apart, samples a row of T qkv rows), so each GEMM is a loop over the
// smaller of samples and heads with a strided batch over the larger one;
// with grouped kv heads the key head is not at a constant stride across
// query heads, so the loop is over heads. A shared key/value head's gradient
// is its group's sum: the group's first head writes it (beta 0), the others
// add (beta 1), in head order. Backward keeps dP/dS of one batch in scratch
// (attention_scratch_count elements).
//
// Decoding (attention_decode, one sequence, n new positions after pos):
// the new keys and values are copied into the caches, then per head
// S = Q·Kᵀ/√d over the pos + n cached rows, the causal softmax with row i
// seeing columns ≤ pos + i, and O = S·V.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace hpc::kernels {

enum class AttnBuf { Qkv, Probs, Out, Dout, Dqkv, Scratch, KCache, VCache };

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

// Rows of `batch` matrices of `rows` × `t_len`: row t of entry z at
// offset + z·batch_stride + t·ld (ld = t_len), seeing columns s ≤ t + offset
// (0: a window's square causal matrix; pos: decoding after pos cached rows).
struct SoftmaxRows {
  AttnOperand p, dp;
  int64_t batch, t_len;
  int64_t rows = 0;    // 0: t_len (square)
  int64_t offset = 0;  // the causal diagonal's shift
  int64_t row_count() const { return rows > 0 ? rows : t_len; }
};

// `rows` rows of `cols` elements: row r from src.offset + r·src.ld to dst.offset + r·dst.ld.
struct RowCopy {
  AttnOperand src, dst;
  int64_t rows, cols;
};

struct AttnStep {
  enum class Kind { Gemm, SoftmaxForward, SoftmaxBackward, Copy } kind;
  CublasGemm matmul;
  SoftmaxRows rows;
  RowCopy row_copy{};
};

// width = heads·d, the queries' (and the output's) width.
struct AttnShape {
  int64_t samples, heads, t_len, width;
  int64_t kv_heads = 0;  // 0: heads
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t d() const { return width / heads; }
  int64_t row() const { return (heads + 2 * kv()) * d(); }  // a qkv row
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
  int64_t t, c, d, heads, kv_heads, row;
  bool loop_samples;  // true: loop over samples, batch over heads (only when kv_heads == heads)
  int64_t group() const { return heads / kv_heads; }
  int64_t q(int64_t b, int64_t h) const { return b * t * row + h * d; }
  int64_t k(int64_t b, int64_t h) const { return b * t * row + (heads + h / group()) * d; }
  int64_t v(int64_t b, int64_t h) const { return b * t * row + (heads + kv_heads + h / group()) * d; }
  int64_t probs(int64_t b, int64_t h) const { return (b * heads + h) * t * t; }
  int64_t out(int64_t b, int64_t h) const { return b * t * c + h * d; }
  int64_t qkv_stride() const { return loop_samples ? d : t * row; }
  int64_t probs_stride() const { return loop_samples ? t * t : heads * t * t; }
  int64_t out_stride() const { return loop_samples ? d : t * c; }
};

inline Layout layout_of(const AttnShape& s) {
  return {s.t_len, s.width, s.d(), s.heads, s.kv(), s.row(), s.samples <= s.heads && s.kv() == s.heads};
}

}  // namespace attn_detail

// Batch entries per GEMM call (the larger of samples and heads; samples with
// grouped kv heads) and the number of calls per GEMM.
inline int64_t attention_batch(const AttnShape& s) {
  return attn_detail::layout_of(s).loop_samples ? s.heads : s.samples;
}
inline int64_t attention_loops(const AttnShape& s) {
  return attn_detail::layout_of(s).loop_samples ? s.samples : s.heads;
}
// Elements of scratch the backward plan uses (dP/dS of one batch of T×T matrices).
inline int64_t attention_scratch_count(const AttnShape& s) { return attention_batch(s) * s.t_len * s.t_len; }

inline std::vector<AttnStep> attention_forward_plan(const AttnShape& s, double scale) {
  using attn_detail::gemm;
  const attn_detail::Layout l = attn_detail::layout_of(s);
  const int64_t t = s.t_len, c = s.width, d = l.d, w = l.row, nb = attention_batch(s);
  std::vector<AttnStep> steps;
  for (int64_t o = 0; o < attention_loops(s); ++o) {  // S = Q·Kᵀ·scale
    const int64_t b = l.loop_samples ? o : 0, h = l.loop_samples ? 0 : o;
    steps.push_back(gemm(false, true, t, t, d, scale, {AttnBuf::Qkv, l.q(b, h), w, l.qkv_stride()},
                         {AttnBuf::Qkv, l.k(b, h), w, l.qkv_stride()},
                         {AttnBuf::Probs, l.probs(b, h), t, l.probs_stride()}, nb));
  }
  AttnStep softmax{AttnStep::Kind::SoftmaxForward, {}, {}};
  softmax.rows = {{AttnBuf::Probs, 0, t, t * t}, {AttnBuf::Probs, 0, t, t * t}, s.samples * s.heads, t};
  steps.push_back(softmax);
  for (int64_t o = 0; o < attention_loops(s); ++o) {  // O = P·V
    const int64_t b = l.loop_samples ? o : 0, h = l.loop_samples ? 0 : o;
    steps.push_back(gemm(false, false, t, d, t, 1.0, {AttnBuf::Probs, l.probs(b, h), t, l.probs_stride()},
                         {AttnBuf::Qkv, l.v(b, h), w, l.qkv_stride()},
                         {AttnBuf::Out, l.out(b, h), c, l.out_stride()}, nb));
  }
  return steps;
}

inline std::vector<AttnStep> attention_backward_plan(const AttnShape& s, double scale) {
  using attn_detail::gemm;
  const attn_detail::Layout l = attn_detail::layout_of(s);
  const int64_t t = s.t_len, c = s.width, d = l.d, w = l.row, nb = attention_batch(s);
  const AttnOperand scratch{AttnBuf::Scratch, 0, t, t * t};
  std::vector<AttnStep> steps;
  for (int64_t o = 0; o < attention_loops(s); ++o) {
    const int64_t b = l.loop_samples ? o : 0, h = l.loop_samples ? 0 : o;
    const AttnOperand q{AttnBuf::Qkv, l.q(b, h), w, l.qkv_stride()};
    const AttnOperand k{AttnBuf::Qkv, l.k(b, h), w, l.qkv_stride()};
    const AttnOperand v{AttnBuf::Qkv, l.v(b, h), w, l.qkv_stride()};
    const AttnOperand p{AttnBuf::Probs, l.probs(b, h), t, l.probs_stride()};
    const AttnOperand dout{AttnBuf::Dout, l.out(b, h), c, l.out_stride()};
    const AttnOperand dq{AttnBuf::Dqkv, l.q(b, h), w, l.qkv_stride()};
    const AttnOperand dk{AttnBuf::Dqkv, l.k(b, h), w, l.qkv_stride()};
    const AttnOperand dv{AttnBuf::Dqkv, l.v(b, h), w, l.qkv_stride()};
    // A grouped key/value head: its first query head writes, the rest add.
    const double beta = l.loop_samples || h % l.group() == 0 ? 0.0 : 1.0;
    steps.push_back(gemm(false, true, t, t, d, 1.0, dout, v, scratch, nb));  // dP = dO·Vᵀ
    AttnStep dv_step = gemm(true, false, t, d, t, 1.0, p, dout, dv, nb);     // dV (+)= Pᵀ·dO
    dv_step.matmul.beta = beta;
    steps.push_back(dv_step);
    AttnStep softmax{AttnStep::Kind::SoftmaxBackward, {}, {}};
    softmax.rows = {p, scratch, nb, t};
    steps.push_back(softmax);                                                  // dS in dP's place
    steps.push_back(gemm(false, false, t, d, t, scale, scratch, k, dq, nb));   // dQ = dS·K·scale
    AttnStep dk_step = gemm(true, false, t, d, t, scale, scratch, q, dk, nb);  // dK (+)= dSᵀ·Q·scale
    dk_step.matmul.beta = beta;
    steps.push_back(dk_step);
  }
  return steps;
}

// Elements of scratch the decode plan uses (the n × (pos + n) scores of one head).
inline int64_t attention_decode_scratch_count(int64_t n, int64_t pos) { return n * (pos + n); }

// One sequence: qkv holds n rows at positions [pos, pos + n); the caches
// [≥ pos + n, kv_heads·d] the earlier rows; out [n, heads·d].
inline std::vector<AttnStep> attention_decode_plan(int64_t heads, int64_t kv_heads, int64_t d, int64_t n,
                                                   int64_t pos, double scale) {
  using attn_detail::gemm;
  const int64_t w = (heads + 2 * kv_heads) * d, kvw = kv_heads * d, len = pos + n, cq = heads * d;
  std::vector<AttnStep> steps;
  for (const auto& [col, cache] :
       {std::pair{heads * d, AttnBuf::KCache}, std::pair{(heads + kv_heads) * d, AttnBuf::VCache}}) {
    AttnStep copy{AttnStep::Kind::Copy, {}, {}};
    copy.row_copy = {{AttnBuf::Qkv, col, w, 0}, {cache, pos * kvw, kvw, 0}, n, kvw};
    steps.push_back(copy);
  }
  const AttnOperand scores{AttnBuf::Scratch, 0, len, 0};
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kv_heads);
    steps.push_back(gemm(false, true, n, len, d, scale, {AttnBuf::Qkv, h * d, w, 0},
                         {AttnBuf::KCache, g * d, kvw, 0}, scores, 1));  // S = Q·Kᵀ·scale
    AttnStep softmax{AttnStep::Kind::SoftmaxForward, {}, {}};
    softmax.rows = {scores, scores, 1, len, n, pos};
    steps.push_back(softmax);
    steps.push_back(gemm(false, false, n, d, len, 1.0, scores, {AttnBuf::VCache, g * d, kvw, 0},
                         {AttnBuf::Out, h * d, cq, 0}, 1));  // O = P·V
  }
  return steps;
}

}  // namespace hpc::kernels
