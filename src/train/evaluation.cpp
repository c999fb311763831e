// The evaluation pass (see evaluation.h).
#include "train/evaluation.h"

#include <algorithm>
#include <memory>

#include "backend/ops.h"
#include "core/error.h"
#include "train/protocol.h"

namespace hpc::train {

namespace {

// The logits as float32 host memory (a view of them when they already are).
Tensor host_float(const Tensor& logits, Tensor& staging) {
  if (logits.device() == Device::CPU && logits.dtype() == DType::F32) return logits;
  if (!staging.defined() || staging.count() != logits.count()) staging = Tensor(logits.shape(), DType::F32);
  Tensor src = logits;
  if (logits.dtype() != DType::F32) {
    src = Tensor(logits.shape(), DType::F32, logits.device());
    backend::convert(logits, src);
  }
  backend::copy(src, staging);
  return staging;
}

}  // namespace

double EvalDetail::class_acc(int64_t c) const {
  int64_t total = 0;
  for (int64_t p = 0; p < classes; ++p) total += confusion[static_cast<size_t>(c * classes + p)];
  return total == 0 ? -1.0 : static_cast<double>(confusion[static_cast<size_t>(c * classes + c)]) / total;
}

EvalResult evaluate_split(const EvalInputs& in, EvalDetail* detail, const BatchSink& sink) {
  const data::SplitInfo& info = in.split->info();
  const int rank = in.comm->rank(), world = in.comm->size();
  const int64_t n = info.size, rows = in.rows;
  const int64_t batches = eval_batches(n, rows);
  // This rank's batches: r, r + W, … (item j is batch j·W + r).
  const int64_t mine = batches > rank ? (batches - rank + world - 1) / world : 0;
  in.loader->start(0, mine, [n, rows, rank, world](int64_t item, int64_t* out) {
    const int64_t first = (item * world + rank) * rows;
    const int64_t valid = std::min(rows, n - first);
    for (int64_t i = 0; i < rows; ++i) out[i] = first + std::min(i, valid - 1);  // padding: masked rows
    return valid;
  });
  const int64_t k = detail ? detail->classes : 0;
  if (detail) detail->confusion.assign(static_cast<size_t>(k * k), 0);
  // One row per batch (EvalBatchSums), filled by the rank that ran it.
  constexpr int64_t ROW = int64_t(wire_size<EvalBatchSums>);
  Tensor table(Shape{std::max<int64_t>(batches, 1), ROW}, DType::F64);
  Tensor confusion(Shape{std::max<int64_t>(k * k, 1)}, DType::F64);
  nn::RunCtx rc;
  rc.training = false;
  rc.seed = in.seed;
  rc.tp = in.tp;
  Tensor staging;
  // Lockstep: the forwards the ranks with fewer batches run so that every rank runs as many.
  if (in.lockstep) {
    const int64_t most = (batches + world - 1) / world;
    if (most > mine) {
      const Shape shape = in.model->input_shape().with_batch(rows);
      const Tensor zeros(shape, in.model->input_dtype(), in.model->device());
      for (int64_t j = mine; j < most; ++j) in.model->forward(zeros, rc);
    }
  }
  for (int64_t j = 0; j < mine; ++j) {
    const int64_t b = j * world + rank;
    const data::Batch& batch = in.loader->next();
    const auto [x, y] = (*in.upload)(batch);
    const Tensor* out = in.stage_forward ? in.stage_forward(x, rc) : &in.model->forward(x, rc);
    if (out == nullptr) continue;  // a pipeline stage before the last: its output went on
    const Tensor& logits = *out;
    const nn::LossStats s = in.loss->forward_backward(logits, y, batch.valid, 1.0, Tensor());
    pack_into(EvalBatchSums{s.loss_sum, static_cast<double>(s.count), static_cast<double>(s.correct1),
                            static_cast<double>(s.correct5)},
              table.data<double>() + ROW * b);
    if (!detail && !sink) continue;
    const Tensor h = host_float(logits, staging);
    if (detail) {
      const int64_t width = h.count() / h.shape()[0];
      const int32_t* labels = batch.y.data<int32_t>();
      for (int64_t i = 0; i < batch.valid; ++i) {
        const float* z = h.data<float>() + i * width;
        const int64_t pred = std::max_element(z, z + width) - z;  // first maximum: ties to the lower class
        const int64_t truth = labels[i];
        if (truth >= 0 && truth < k && pred < k) confusion.data<double>()[truth * k + pred] += 1;
      }
    }
    if (sink) sink(b, batch.valid, h);
  }
  in.loader->stop();
  in.comm->allreduce(table, dist::ReduceOp::Sum);  // one non-zero contribution per slot: exact
  if (in.stages) in.stages->allreduce(table, dist::ReduceOp::Sum);  // the last stage's rows, everywhere
  if (detail) {
    in.comm->allreduce(confusion, dist::ReduceOp::Sum);  // integer counts < 2^53: exact
    for (int64_t i = 0; i < k * k; ++i)
      detail->confusion[static_cast<size_t>(i)] = static_cast<int64_t>(confusion.data<double>()[i]);
  }
  EvalBatchSums all;  // the batches' sums added in batch order: the same bits on any number of ranks
  for (int64_t b = 0; b < batches; ++b) {
    const EvalBatchSums r = unpack<EvalBatchSums>(table.data<double>() + ROW * b);
    all.loss_sum += r.loss_sum, all.count += r.count, all.correct1 += r.correct1, all.correct5 += r.correct5;
  }
  EvalResult res;
  res.count = static_cast<int64_t>(all.count);
  res.loss = all.loss_sum / std::max(1.0, all.count);
  res.acc = all.correct1 / std::max(1.0, all.count);
  if (in.top5) res.top5 = all.correct5 / std::max(1.0, all.count);
  return res;
}

}  // namespace hpc::train
