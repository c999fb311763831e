// GradReducer (see grad_reducer.h).
#include "dist/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/fault.h"
#include "core/host_pages.h"
#include "dist/shards.h"

namespace hpc::dist {

std::vector<std::pair<int64_t, int64_t>> GradReducer::plan(int64_t n, int64_t bucket_elems,
                                                           const std::vector<int64_t>& cut_points,
                                                           int64_t first_elems) {
  HPC_ASSERT(bucket_elems >= 1, "bucket size");
  if (first_elems < 1) first_elems = bucket_elems;
  auto size_of_next = [&](const std::vector<std::pair<int64_t, int64_t>>& done) {
    return done.empty() ? first_elems : bucket_elems;
  };
  std::vector<std::pair<int64_t, int64_t>> out;
  if (cut_points.empty()) {
    for (int64_t end = n; end > 0;) {
      const int64_t begin = std::max<int64_t>(0, end - size_of_next(out));
      out.emplace_back(begin, end);
      end = begin;
    }
    return out;
  }
  std::vector<int64_t> cuts;
  for (int64_t c : cut_points)
    if (c > 0 && c < n) cuts.push_back(c);
  std::sort(cuts.rbegin(), cuts.rend());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  cuts.push_back(0);
  int64_t end = n;
  for (int64_t c : cuts)
    if (end - c >= size_of_next(out) || c == 0) {
      if (c < end) out.emplace_back(c, end);
      end = c;
    }
  return out;
}

GradReducer::GradReducer(Communicator& comm, const Tensor& grads, double bucket_bytes,
                         const std::vector<int64_t>& cut_points, bool overlap,
                         std::vector<int64_t> shard_bounds)
    : comm_(comm), grads_(grads), overlap_(overlap), shards_(std::move(shard_bounds)) {
  HPC_ASSERT(shards_.empty() ||
                 (shards_.size() == static_cast<size_t>(comm.size()) + 1 && shards_.back() == grads.count()),
             "GradReducer: shard bounds do not fit the buffer");
  auto elems = [&](double bytes) {
    return static_cast<int64_t>(
        std::clamp(std::ceil(bytes / static_cast<double>(dtype_size(grads.dtype()))), 1.0, 9.0e18));
  };
  for (auto [b, e] : plan(grads.count(), elems(bucket_bytes), cut_points,
                          elems(std::min(bucket_bytes, FIRST_BUCKET_BYTES))))
    buckets_.push_back({b, e, nullptr});
}

std::vector<std::pair<int64_t, int64_t>> GradReducer::bucket_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Bucket& b : buckets_) out.emplace_back(b.begin, b.end);
  return out;
}

void GradReducer::begin() {
  next_ = 0;
  for (Bucket& b : buckets_) {
    b.request.reset();
    b.done = false;
  }
}

void GradReducer::start(size_t upto) {
  if (upto <= next_) return;
  std::vector<Tensor> bufs;
  for (size_t i = next_; i < upto; ++i)
    bufs.push_back(grads_.slice(buckets_[i].begin, Shape{buckets_[i].end - buckets_[i].begin}));
  std::vector<std::unique_ptr<Request>> reqs;
  if (shards_.empty()) {
    reqs = comm_.allreduce_group(bufs, ReduceOp::Avg);
  } else {
    std::vector<std::vector<int64_t>> bounds;
    for (size_t i = next_; i < upto; ++i)
      bounds.push_back(shard_bounds_within(shards_, buckets_[i].begin, buckets_[i].end));
    reqs = comm_.reduce_scatter_group(bufs, ReduceOp::Avg, bounds);
  }
  for (size_t i = next_; i < upto; ++i) buckets_[i].request = std::move(reqs[i - next_]);
  next_ = upto;
}

void GradReducer::on_ready(int64_t frontier) {
  if (!overlap_) return;
  size_t ready = next_;
  while (ready < buckets_.size() && buckets_[ready].begin >= frontier) ++ready;
  start(ready);
  // Advance the buckets in flight (MPI moves data only inside its calls). The oldest first;
  // one that is not done yet means the younger ones are not either.
  for (size_t i = 0; i < next_; ++i) {
    if (buckets_[i].done) continue;
    if (!buckets_[i].request->test()) break;
    complete(buckets_[i]);
  }
}

void GradReducer::release_reduced() {
  HPC_ASSERT(sharded() && grads_.device() == Device::CPU, "release_reduced: sharded host gradients only");
  release_ = true;
}

void GradReducer::complete(Bucket& b) {
  b.done = true;
  if (!release_) return;
  const int64_t lo = shards_[static_cast<size_t>(comm_.rank())],
                hi = shards_[static_cast<size_t>(comm_.rank()) + 1];
  release_zeroed(grads_, b.begin, std::min(b.end, lo));  // the part below the own shard
  release_zeroed(grads_, std::max(b.begin, hi), b.end);  // and above it
}

double GradReducer::finish() {
  auto t0 = std::chrono::steady_clock::now();
  start(buckets_.size());
  fault_at(FaultPoint::Allreduce);  // test-only: a signal while every bucket's AllReduce is in flight
  for (Bucket& b : buckets_) {
    b.request->wait_on_device();
    if (!b.done) complete(b);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace hpc::dist

namespace hpc::dist {

void GradReducer::start_allgather(const Tensor& params) {
  HPC_ASSERT(sharded() && params.count() == grads_.count(),
             "start_allgather: not sharded, or another layout");
  HPC_ASSERT(!allgather_pending(), "start_allgather: the previous all-gather is still pending");
  gathers_.clear();
  gathered_ = 0;
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it)  // launch order is highest offsets first
    gathers_.push_back({it->begin, it->end,
                        comm_.allgather_shards_async(params.slice(it->begin, Shape{it->end - it->begin}),
                                                     shard_bounds_within(shards_, it->begin, it->end))});
  fault_at(FaultPoint::Allgather);  // test-only: a rank killed while the parameter all-gathers are in flight
}

void GradReducer::params_ready(int64_t end) {
  while (gathered_ < gathers_.size() && gathers_[gathered_].begin < end)
    gathers_[gathered_++].request->wait_on_device();
  // Advance the rest (MPI moves data only inside its calls); the oldest first.
  for (size_t i = gathered_; i < gathers_.size(); ++i)
    if (!gathers_[i].request->test()) break;
}

void GradReducer::finish_allgather() {
  while (gathered_ < gathers_.size()) gathers_[gathered_++].request->wait_on_device();
}

}  // namespace hpc::dist
