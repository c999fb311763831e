// Counter-based random numbers: a value is a pure function of (seed, stream,
// index), so dropout masks and initialisations are reproducible on any
// device and in any order, and the "RNG state" a checkpoint must carry is
// just a seed and a counter. The mixer is SplitMix64 (Steele et al. 2014),
// which passes BigCrush when fed a counter.
#pragma once

#include <cstdint>

#include "hd.h"

namespace hpc::kernels {

HD uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64 random bits for element `index` of stream `stream` under `seed`.
HD uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + index);
}

// Uniform in [0, 1) with 53 bits of precision.
HD double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(random_bits(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace hpc::kernels
