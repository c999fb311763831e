// Sharding (see sharding.h).
#include "train/sharding.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "backend/ops.h"
#include "core/error.h"
#include "core/host_pages.h"
#include "dist/shards.h"

namespace hpc::train {

namespace {

// dst (any device and float dtype) ← the host float32 src.
void assign(const Tensor& dst, const Tensor& src) {
  if (dst.count() == 0) return;
  const Tensor from = src.view(dst.shape());
  if (dst.dtype() == DType::F32) return backend::copy(from, dst);
  Tensor f32(dst.shape(), DType::F32, dst.device());
  backend::copy(from, f32);
  backend::convert(f32, dst);
}

// The sum of squares of g (elements [lo, lo + g.count()) of the layout) outside the skip ranges,
// piece by piece in order: without skips exactly backend::sum_squares(g).
double squares_outside(const Tensor& g, int64_t lo, const std::vector<std::pair<int64_t, int64_t>>& skip) {
  const int64_t hi = lo + g.count();
  double sum = 0;
  int64_t at = lo;
  auto add = [&](int64_t a, int64_t b) {
    if (b > a) sum += backend::sum_squares(g.slice(a - lo, Shape{b - a}));
  };
  for (const auto& [a, b] : skip) {
    if (b <= at || a >= hi) continue;
    add(at, std::max(at, a));
    at = std::min(hi, b);
  }
  add(at, hi);
  return sum;
}

}  // namespace

Sharding::Sharding(int stage, int rank, int world, int64_t num_params, Device device)
    : stage_(stage),
      rank_(rank),
      world_(world),
      num_params_(num_params),
      device_(device),
      bounds_(dist::shard_bounds(num_params, world)) {
  HPC_ASSERT(stage >= 0 && stage <= 3, "dist.zero must be 0, 1, 2 or 3");
}

std::string Sharding::note() const {
  if (stage_ == 0 || world_ > 1) return "";
  return "dist.zero " + std::to_string(stage_) + " with one rank: nothing to shard, training unsharded";
}

void Sharding::zero_grads(const Tensor& grads) const {
  if (!keeps_own_grads_only()) return backend::fill(grads, 0.0);
  release_zeroed(grads, 0, lo());
  if (count() > 0) backend::fill(grads.slice(lo(), Shape{count()}), 0.0);
  release_zeroed(grads, hi(), num_params_);
}

double Sharding::grad_squares(const Tensor& grads, dist::Communicator& host,
                              const std::vector<std::pair<int64_t, int64_t>>& skip) const {
  std::vector<double> parts(static_cast<size_t>(world_), 0.0);
  if (active()) {
    HPC_ASSERT(grads.count() == count(), "grad_norm: not this rank's shard");
    double mine = squares_outside(grads, lo(), skip);
    host.allgather(Tensor::borrow(&mine, Shape{1}, DType::F64),
                   Tensor::borrow(parts.data(), Shape{world_}, DType::F64));
  } else if (device_ == Device::CUDA || world_ == 1) {
    return squares_outside(grads, 0, skip);
  } else {
    HPC_ASSERT(grads.count() == num_params_, "grad_norm: not the whole gradient buffer");
    for (int q = 0; q < world_; ++q) {
      const int64_t a = bounds_[static_cast<size_t>(q)], b = bounds_[static_cast<size_t>(q) + 1];
      parts[static_cast<size_t>(q)] = squares_outside(grads.slice(a, Shape{b - a}), a, skip);
    }
  }
  double sum = parts[0];
  for (int q = 1; q < world_; ++q) sum += parts[static_cast<size_t>(q)];
  return sum;
}

void Sharding::scatter_from_root(ckpt::FlatSource* source, size_t k, const Tensor& mine,
                                 dist::Communicator& host) const {
  HPC_ASSERT(active() && mine.count() == count(), "scatter_from_root: not this rank's shard");
  HPC_ASSERT(rank_ != 0 || source != nullptr, "scatter_from_root: rank 0 reads the file");
  const Tensor own = mine.view(Shape{mine.count()});
  // Every range goes in pieces of CHUNK_ELEMS (the last one shorter). Rank 0 alternates two staging
  // buffers (one read while the other is sent); the others receive into one.
  const int64_t piece = ckpt::CHUNK_ELEMS;
  int64_t largest = count();
  if (rank_ == 0)
    for (size_t q = 0; q + 1 < bounds_.size(); ++q) largest = std::max(largest, bounds_[q + 1] - bounds_[q]);
  const Shape staged{std::max<int64_t>(1, std::min(piece, largest))};
  std::array<Tensor, 2> staging{Tensor(staged, DType::F32),
                                rank_ == 0 ? Tensor(staged, DType::F32) : Tensor()};
  std::unique_ptr<dist::Request> sending;
  int next = 0;
  for (int q = 0; q < world_; ++q) {
    if (rank_ != 0 && q != rank_) continue;
    const int64_t lo = bounds_[static_cast<size_t>(q)], hi = bounds_[static_cast<size_t>(q) + 1];
    for (int64_t begin = lo; begin < hi; begin += piece) {
      const int64_t n = std::min(piece, hi - begin);
      const Tensor part = staging[static_cast<size_t>(next)].slice(0, Shape{n});
      if (rank_ == 0) {
        source->read(k, begin, part);  // while the previous piece travels
        if (q == 0) {
          assign(own.slice(begin - lo, Shape{n}), part);
          continue;
        }
        if (sending) sending->wait();
        sending = host.send_async(part, q);
        next ^= 1;
      } else {
        host.recv(part, 0);
        assign(own.slice(begin - lo, Shape{n}), part);
      }
    }
  }
  if (sending) sending->wait();
}

}  // namespace hpc::train
