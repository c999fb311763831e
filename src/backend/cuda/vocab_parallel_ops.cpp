// CUDA ops of the vocabulary split (ops.def): the embedding's shard gather
// and scatter, and the passes of the vocabulary-parallel cross-entropy
// (nn/vocab_parallel_loss.cpp): shape checks, then the launchers of
// kernels/vocab_parallel.cu. A token id outside the vocabulary is the CPU's
// one-line error (one number read back per forward, as the unsplit embedding does);
// a label outside it leaves NaN in its row's label logit (stats plane 3),
// which the loss turns into the CPU's error once the group has reduced it.
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_dispatch.h"
#include "backend/ops_impl.h"
#include "kernels/vocab_parallel.cuh"

namespace hpc::backend::cuda {

namespace {

struct ShardRows {
  int64_t rows, width, real;
};

ShardRows shard_rows(const char* op, const Tensor& logits, int64_t n_valid, int64_t col0, int64_t vocab,
                     const Tensor& stats) {
  require_device(op, {&logits, &stats});
  HPC_ASSERT(logits.shape().rank() == 2, std::string(op) + ": logits must be [rows, shard]");
  const int64_t rows = logits.shape()[0], width = logits.shape()[1];
  HPC_ASSERT(n_valid >= 0 && n_valid <= rows && col0 >= 0 && vocab > 0,
             std::string(op) + ": rows or columns");
  HPC_ASSERT(stats.dtype() == DType::F64 && stats.count() == 4 * rows, std::string(op) + ": stats [4, rows]");
  return {rows, width, std::clamp<int64_t>(vocab - col0, 0, width)};
}

// The ids as int32 keys in device scratch (checked: a bad one is a UserError naming it), followed by
// `extra` more int32 of scratch.
int32_t* shard_keys(const Tensor& ids, int64_t vocab, const char* op, int64_t extra = 0) {
  const int64_t n = ids.count();
  Context& ctx = Context::get();
  auto* first_bad =
      static_cast<int64_t*>(ctx.scratch(sizeof(int64_t) + sizeof(int32_t) * static_cast<size_t>(n + extra)));
  auto* keys = reinterpret_cast<int32_t*>(first_bad + 1);
  const int64_t none = n;
  cudaCheck(cudaMemcpyAsync(first_bad, &none, sizeof none, cudaMemcpyHostToDevice, ctx.compute()));
  if (ids.dtype() == DType::F32)
    kernels::shard_keys(ids.data<float>(), n, vocab, keys, first_bad, ctx.compute());
  else if (ids.dtype() == DType::F64)
    kernels::shard_keys(ids.data<double>(), n, vocab, keys, first_bad, ctx.compute());
  else if (ids.dtype() == DType::I32)
    kernels::shard_keys(ids.data<int32_t>(), n, vocab, keys, first_bad, ctx.compute());
  else
    HPC_ASSERT(false, std::string(op) + ": token ids in float32, float64 or int32");
  const int64_t bad = *static_cast<const int64_t*>(ctx.read_back(first_bad, sizeof(int64_t)));
  if (bad < n)
    throw UserError("the token at position " + std::to_string(bad) +
                    " of the batch is not an id in the model's vocabulary [0, " + std::to_string(vocab) +
                    ")");
  return keys;
}

}  // namespace

void embedding_shard_forward(const Tensor& ids, const Tensor& wte, int64_t first, int64_t vocab,
                             const Tensor& wpe, const Tensor& y) {
  require_device("embedding_shard_forward", {&ids, &wte, &wpe, &y});
  const int64_t c = wte.shape()[1], rows = wte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  HPC_ASSERT(y.count() == bt * c && (!wpe.defined() || (wpe.shape()[1] == c && wpe.shape()[0] >= t_len)),
             "embedding_shard_forward: shapes");
  const int32_t* keys = shard_keys(ids, vocab, "embedding_shard_forward");
  dispatch_storage(y.dtype(), "embedding_shard_forward", [&]<typename T>() {
    kernels::embedding_shard_forward(
        keys, ptr<T>(wte, "embedding_shard_forward"), rows, first, ptr<T>(wpe, "embedding_shard_forward"),
        ptr<T>(y, "embedding_shard_forward"), bt, t_len, c, Context::get().compute());
  });
}

void embedding_shard_backward(const Tensor& ids, const Tensor& dy, const Tensor& dwte, int64_t first,
                              int64_t vocab, const Tensor& dwpe) {
  require_device("embedding_shard_backward", {&ids, &dy, &dwte, &dwpe});
  const int64_t c = dwte.shape()[1], rows = dwte.shape()[0], bt = ids.count();
  const int64_t t_len = ids.shape().rank() > 1 ? ids.shape()[1] : bt;
  int32_t* keys = shard_keys(ids, vocab, "embedding_shard_backward", bt);
  int32_t* sorted = keys + bt;  // the sort's scratch, after the keys
  dispatch_storage(dy.dtype(), "embedding_shard_backward", [&]<typename T>() {
    kernels::embedding_shard_backward(
        keys, sorted, ptr<T>(dy, "embedding_shard_backward"), ptr<T>(dwte, "embedding_shard_backward"), rows,
        first, ptr<T>(dwpe, "embedding_shard_backward"), bt, t_len, c, Context::get().compute());
  });
}

void vocab_shard_max(const Tensor& logits, int64_t n_valid, int64_t col0, int64_t vocab,
                     const Tensor& stats) {
  const ShardRows s = shard_rows("vocab_shard_max", logits, n_valid, col0, vocab, stats);
  dispatch_storage(logits.dtype(), "vocab_shard_max", [&]<typename T>() {
    kernels::vocab_shard_max(logits.data<T>(), n_valid, s.rows, s.width, s.real, stats.data<double>(),
                             Context::get().compute());
  });
}

void vocab_shard_sums(const Tensor& logits, const Tensor& labels, int64_t n_valid, int64_t col0,
                      int64_t vocab, const Tensor& stats) {
  const ShardRows s = shard_rows("vocab_shard_sums", logits, n_valid, col0, vocab, stats);
  require_device("vocab_shard_sums", {&labels});
  HPC_ASSERT(labels.dtype() == DType::I32 && labels.count() >= n_valid, "vocab_shard_sums: labels");
  dispatch_storage(logits.dtype(), "vocab_shard_sums", [&]<typename T>() {
    kernels::vocab_shard_sums(logits.data<T>(), labels.data<int32_t>(), n_valid, s.rows, s.width, s.real,
                              col0, vocab, stats.data<double>(), Context::get().compute());
  });
}

void vocab_shard_grad(const Tensor& logits, const Tensor& labels, int64_t n_valid, int64_t col0,
                      int64_t vocab, double label_smoothing, double grad_scale, const Tensor& stats,
                      const Tensor& dlogits, const Tensor& above) {
  const ShardRows s = shard_rows("vocab_shard_grad", logits, n_valid, col0, vocab, stats);
  require_device("vocab_shard_grad", {&labels, &dlogits, &above});
  HPC_ASSERT(!dlogits.defined() || (dlogits.count() == logits.count() && dlogits.dtype() == logits.dtype()),
             "vocab_shard_grad: dlogits shape");
  HPC_ASSERT(above.dtype() == DType::F64 && above.count() >= s.rows, "vocab_shard_grad: above [rows]");
  dispatch_storage(logits.dtype(), "vocab_shard_grad", [&]<typename T>() {
    kernels::vocab_shard_grad(logits.data<T>(), labels.data<int32_t>(), n_valid, s.rows, s.width, s.real,
                              col0, vocab, label_smoothing, grad_scale, stats.data<double>(),
                              ptr<T>(dlogits, "vocab_shard_grad"), above.data<double>(),
                              Context::get().compute());
    if (dlogits.defined() && n_valid < s.rows)
      cudaCheck(cudaMemsetAsync(dlogits.data<T>() + n_valid * s.width, 0,
                                static_cast<size_t>((s.rows - n_valid) * s.width) * sizeof(T),
                                Context::get().compute()));
  });
}

}  // namespace hpc::backend::cuda
