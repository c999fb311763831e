// CPU ops of the vocabulary split (ops.def): the embedding's shard gather and
// scatter (in position order, as the unsplit embedding's), and the passes of
// the vocabulary-parallel cross-entropy (nn/vocab_parallel_loss.cpp), each
// row of the shard through kernels/loss_math.h's shard_row_* functions,
// which the CUDA kernels run too.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/dispatch.h"
#include "backend/ops_impl.h"
#include "core/error.h"
#include "kernels/loss_math.h"

namespace hpc::backend::cpu {

namespace {

struct ShardRows {
  int64_t rows, width, real;
};

ShardRows shard_rows(const char* op, const Tensor& logits, int64_t n_valid, int64_t col0, int64_t vocab,
                     const Tensor& stats) {
  HPC_ASSERT(logits.shape().rank() == 2, std::string(op) + ": logits must be [rows, shard]");
  const int64_t rows = logits.shape()[0], width = logits.shape()[1];
  HPC_ASSERT(n_valid >= 0 && n_valid <= rows && col0 >= 0 && vocab > 0,
             std::string(op) + ": rows or columns");
  HPC_ASSERT(stats.dtype() == DType::F64 && stats.count() == 4 * rows, std::string(op) + ": stats [4, rows]");
  return {rows, width, std::clamp<int64_t>(vocab - col0, 0, width)};
}

void check_labels(const Tensor& labels, int64_t n_valid, int64_t vocab) {
  HPC_ASSERT(labels.dtype() == DType::I32 && labels.count() >= n_valid, "vocabulary-parallel loss: labels");
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n_valid; ++i)
    if (lab[i] < 0 || lab[i] >= vocab)
      throw UserError("label " + std::to_string(lab[i]) + " of sample " + std::to_string(i) +
                      " is outside the model's " + std::to_string(vocab) + " classes [0, " +
                      std::to_string(vocab) + ")");
}

// A token id of the batch as an integer, checked against the whole vocabulary.
template <typename T>
int64_t token_in_vocab(const T* ids, int64_t i, int64_t vocab) {
  const T v = ids[i];
  if (!(v >= T(0) && v < T(vocab) && v == std::floor(v)))
    throw UserError("token " + std::to_string(double(v)) + " at position " + std::to_string(i) +
                    " of the batch is not an id in the model's vocabulary [0, " + std::to_string(vocab) +
                    ")");
  return static_cast<int64_t>(v);
}

}  // namespace

void embedding_shard_forward(const Tensor& ids, const Tensor& wte, int64_t first, int64_t vocab,
                             const Tensor& wpe, const Tensor& y) {
  const int64_t c = wte.shape()[1], rows = wte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  HPC_ASSERT(y.count() == bt * c && (!wpe.defined() || (wpe.shape()[1] == c && wpe.shape()[0] >= t_len)),
             "embedding_shard_forward: shapes");
  dispatch_float(y.dtype(), "embedding_shard_forward", [&]<typename T>() {
    const T* id = ids.data<T>();
    for (int64_t i = 0; i < bt; ++i) {
      const int64_t v = token_in_vocab(id, i, vocab) - first;
      const T* tok = v >= 0 && v < rows ? wte.data<T>() + v * c : nullptr;
      const T* pos = wpe.defined() ? wpe.data<T>() + (i % t_len) * c : nullptr;
      T* out = y.data<T>() + i * c;
      for (int64_t j = 0; j < c; ++j)
        out[j] = tok && pos ? tok[j] + pos[j] : tok ? tok[j] : pos ? pos[j] : T(0);
    }
  });
}

void embedding_shard_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, int64_t first,
                              int64_t vocab, const Tensor& dwpe) {
  const int64_t c = dwte.shape()[1], rows = dwte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  dispatch_float(dy.dtype(), "embedding_shard_backward", [&]<typename T>() {
    const T* id = ids.data<T>();
    for (int64_t i = 0; i < bt; ++i) {
      const T* g = dy.data<T>() + i * c;
      const int64_t v = token_in_vocab(id, i, vocab) - first;
      if (v >= 0 && v < rows) {
        T* tok = dwte.data<T>() + v * c;
        for (int64_t j = 0; j < c; ++j) tok[j] += g[j];
      }
      if (dwpe.defined()) {
        T* pos = dwpe.data<T>() + (i % t_len) * c;
        for (int64_t j = 0; j < c; ++j) pos[j] += g[j];
      }
    }
  });
}

void vocab_shard_max(const Tensor& logits, int64_t n_valid, int64_t col0, int64_t vocab,
                     const Tensor& stats) {
  const ShardRows s = shard_rows("vocab_shard_max", logits, n_valid, col0, vocab, stats);
  double* st = stats.data<double>();
  dispatch_float(logits.dtype(), "vocab_shard_max", [&]<typename T>() {
    for (int64_t r = 0; r < n_valid; ++r)
      st[r] = kernels::shard_row_max(logits.data<T>() + r * s.width, s.real);
  });
}

void vocab_shard_sums(const Tensor& logits, const Tensor& labels, int64_t n_valid, int64_t col0,
                      int64_t vocab, const Tensor& stats) {
  const ShardRows s = shard_rows("vocab_shard_sums", logits, n_valid, col0, vocab, stats);
  check_labels(labels, n_valid, vocab);
  double* st = stats.data<double>();
  const int32_t* lab = labels.data<int32_t>();
  dispatch_float(logits.dtype(), "vocab_shard_sums", [&]<typename T>() {
    const int64_t n = s.rows;
    for (int64_t r = 0; r < n_valid; ++r)
      kernels::shard_row_sums(logits.data<T>() + r * s.width, s.real, col0, lab[r], st[r], st + n + r,
                              st + 2 * n + r, st + 3 * n + r);
  });
}

void vocab_shard_grad(const Tensor& logits, const Tensor& labels, int64_t n_valid, int64_t col0,
                      int64_t vocab, double label_smoothing, double grad_scale, const Tensor& stats,
                      const Tensor& dlogits, const Tensor& above) {
  const ShardRows s = shard_rows("vocab_shard_grad", logits, n_valid, col0, vocab, stats);
  HPC_ASSERT(!dlogits.defined() || (dlogits.count() == logits.count() && dlogits.dtype() == logits.dtype()),
             "vocab_shard_grad: dlogits shape");
  HPC_ASSERT(above.dtype() == DType::F64 && above.count() >= s.rows, "vocab_shard_grad: above [rows]");
  const double* st = stats.data<double>();
  const int32_t* lab = labels.data<int32_t>();
  double* ab = above.data<double>();
  dispatch_float(logits.dtype(), "vocab_shard_grad", [&]<typename T>() {
    for (int64_t r = 0; r < n_valid; ++r) {
      T* dz = dlogits.defined() ? dlogits.data<T>() + r * s.width : nullptr;
      const int64_t n = s.rows;
      ab[r] = static_cast<double>(kernels::shard_row_grad(logits.data<T>() + r * s.width, s.width, s.real,
                                                          col0, lab[r], st[r], st[n + r], st[3 * n + r],
                                                          label_smoothing, vocab, grad_scale, dz));
    }
    if (dlogits.defined() && n_valid < s.rows)
      std::memset(dlogits.data<T>() + n_valid * s.width, 0,
                  static_cast<size_t>((s.rows - n_valid) * s.width) * sizeof(T));
  });
}

}  // namespace hpc::backend::cpu
