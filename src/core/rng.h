// A seeded random stream for host-side work (initialisation, shuffles).
// Its whole state is (seed, stream, counter): checkpoints store those three
// numbers and resume bit-exactly.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/random.h"

namespace hpc {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}

  uint64_t next_u64() { return kernels::random_bits(seed_, stream_, counter_++); }
  double uniform() { return kernels::random_uniform(seed_, stream_, counter_++); }
  // Uniform integer in [0, n) without modulo bias worth caring about (n ≪ 2⁶⁴).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  // Standard normal (Box–Muller; uses two draws, discards the second value to stay stateless).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t c) { counter_ = c; }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_ = 0;
};

}  // namespace hpc
