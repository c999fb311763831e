// Parameter shards and the vocabulary split (see tensor_parallel.h).
#include "nn/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hpc::nn {

int64_t VocabSplit::real_in_shard() const { return std::clamp<int64_t>(vocab - first, 0, shard); }

VocabSplit vocab_split(int64_t vocab, const TpSplit& tp) {
  VocabSplit v;
  v.vocab = vocab;
  if (!tp.active()) {  // one rank computes the real vocabulary: nothing to pad
    v.padded = v.shard = vocab;
    return v;
  }
  const int64_t align = VOCAB_ALIGN * tp.size;
  v.padded = (vocab + align - 1) / align * align;
  v.shard = v.padded / tp.size;
  v.first = v.shard * tp.rank;
  return v;
}

ParamShard ParamShard::block(const Shape& full, int dim, int parts, int rank, int64_t padded) {
  ParamShard s;
  s.full = full;
  s.dim = dim;
  const int64_t extent = padded > 0 ? padded : full[dim];
  HPC_ASSERT(extent % parts == 0, "ParamShard::block: " + std::to_string(extent) + " entries in " +
                                      std::to_string(parts) + " parts");
  const int64_t n = extent / parts;
  s.pieces.push_back({0, n * rank, n});
  return s;
}

Shape ParamShard::local_shape() const {
  if (!split()) return full;
  std::vector<int64_t> dims = full.dims();
  int64_t n = 0;
  for (const ShardPiece& p : pieces) n += p.length;
  dims[static_cast<size_t>(dim)] = n;
  return Shape(dims);
}

std::vector<int64_t> ParamShard::global_index() const {
  const Shape local = local_shape();
  std::vector<int64_t> out(static_cast<size_t>(local.count()));
  if (!split()) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(i);
    return out;
  }
  // Row-major: outer (dims before dim) × dim × inner (dims after it).
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= full[d];
  for (int d = dim + 1; d < full.rank(); ++d) inner *= full[d];
  const int64_t local_dim = local[dim], full_dim = full[dim];
  // Each local entry of dim → its global entry (or -1 past the unsplit extent).
  std::vector<int64_t> entry(static_cast<size_t>(local_dim), -1);
  for (const ShardPiece& p : pieces)
    for (int64_t k = 0; k < p.length; ++k) {
      const int64_t g = p.global + k;
      entry[static_cast<size_t>(p.local + k)] = g < full_dim ? g : -1;
    }
  size_t i = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t e = 0; e < local_dim; ++e)
      for (int64_t in = 0; in < inner; ++in, ++i) {
        const int64_t g = entry[static_cast<size_t>(e)];
        out[i] = g < 0 ? -1 : (o * full_dim + g) * inner + in;
      }
  return out;
}

namespace {

void check_pair(const Tensor& full, const ParamShard& shard, const Tensor& part) {
  HPC_ASSERT(full.device() == Device::CPU && part.device() == Device::CPU && full.dtype() == part.dtype(),
             "shard copy: host tensors of one dtype");
  HPC_ASSERT(full.count() == shard.full.count() && part.count() == shard.local_shape().count(),
             "shard copy: " + full.shape().str() + " / " + part.shape().str() +
                 " do not match the shard of " + shard.full.str());
}

}  // namespace

void take_shard(const Tensor& full, const ParamShard& shard, const Tensor& part) {
  check_pair(full, shard, part);
  const size_t es = dtype_size(part.dtype());
  const char* src = static_cast<const char*>(full.raw());
  char* dst = static_cast<char*>(part.raw());
  const std::vector<int64_t> g = shard.global_index();
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] < 0)
      std::memset(dst + i * es, 0, es);
    else
      std::memcpy(dst + i * es, src + static_cast<size_t>(g[i]) * es, es);
  }
}

void put_shard(const Tensor& part, const ParamShard& shard, const Tensor& full) {
  check_pair(full, shard, part);
  const size_t es = dtype_size(part.dtype());
  const char* src = static_cast<const char*>(part.raw());
  char* dst = static_cast<char*>(full.raw());
  const std::vector<int64_t> g = shard.global_index();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] >= 0) std::memcpy(dst + static_cast<size_t>(g[i]) * es, src + i * es, es);
}

}  // namespace hpc::nn
