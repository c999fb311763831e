// GradReducer (see grad_reducer.h).
#include "dist/grad_reducer.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace hpc::dist {

GradReducer::GradReducer(Communicator& comm, const Tensor& grads, double bucket_bytes)
    : comm_(comm), grads_(grads) {
  const int64_t n = grads.count();
  const int64_t per_bucket =
      std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / static_cast<double>(dtype_size(grads.dtype()))));
  for (int64_t end = n; end > 0; end -= per_bucket) buckets_.push_back({std::max<int64_t>(0, end - per_bucket), end, nullptr});
}

void GradReducer::begin() {
  next_ = 0;
  for (Bucket& b : buckets_) b.request.reset();
}

void GradReducer::start(Bucket& b) {
  b.request = comm_.allreduce_async(grads_.slice(b.begin, Shape{b.end - b.begin}), ReduceOp::Avg);
}

void GradReducer::on_ready(int64_t frontier) {
  while (next_ < buckets_.size() && buckets_[next_].begin >= frontier) start(buckets_[next_++]);
  // Give non-blocking MPI a chance to progress the buckets in flight.
  for (size_t i = 0; i < next_; ++i) buckets_[i].request->test();
}

double GradReducer::finish() {
  auto t0 = std::chrono::steady_clock::now();
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  for (Bucket& b : buckets_) b.request->wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace hpc::dist
