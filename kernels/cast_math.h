// 16-bit floating-point storage types and their conversions, shared by the
// CUDA kernels and the CPU unit tests.
//
// Bf16 (bfloat16: 8 exponent bits, 7 mantissa bits) and Half (IEEE binary16:
// 5 exponent bits, 10 mantissa bits) are storage only: kernels load them to
// float, compute in float and round once on store. The conversions are
// written in integer bit arithmetic instead of calling CUDA's intrinsics so
// that the exact function the GPU runs is the one the CPU tests check
// exhaustively (every 16-bit pattern, every rounding tie). Rounding is to
// nearest, ties to even, like __float2bfloat16_rn / __float2half_rn; values
// past the largest finite number become ±inf; NaN stays a (quiet) NaN.
//
// The float → half routine is F. Giesen's "float_to_half_fast3_rtne"
// (public domain, 2016): normal results round with an integer add, and
// subnormal results let the FPU's own round-to-nearest-even do the work by
// adding a magic constant.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hd.h"

namespace hpc::kernels {

HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);  // a register move on both sides; no aliasing UB
  return u;
}

HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// ---- bfloat16 ----------------------------------------------------------------

HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}

HD float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// ---- IEEE half ---------------------------------------------------------------

HD uint16_t float_to_half_bits(float f) {
  constexpr uint32_t F32_INF = 255u << 23;
  constexpr uint32_t F16_MAX_PLUS = (127u + 16u) << 23;  // 2^16: everything from here is inf or NaN
  constexpr uint32_t DENORM_MAGIC = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = float_bits(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t out;
  if (u >= F16_MAX_PLUS) {
    out = u > F32_INF ? 0x7e00u : 0x7c00u;  // NaN → quiet NaN, large → inf
  } else if (u < (113u << 23)) {
    // Subnormal half or zero: aligning the 10 mantissa bits at the bottom of
    // a float by adding 0.5 lets the float addition round (to nearest even).
    const float aligned = bits_float(u) + bits_float(DENORM_MAGIC);
    out = float_bits(aligned) - DENORM_MAGIC;
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;  // re-bias the exponent, round half down…
    u += mant_odd;                                          // …or up when that makes the result even
    out = u >> 13;                                          // a carry out of the top is 0x7c00: inf
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

HD float half_bits_to_float(uint16_t h) {
  constexpr uint32_t SHIFTED_EXP = 0x7c00u << 13;
  uint32_t o = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = SHIFTED_EXP & o;
  o += static_cast<uint32_t>(127 - 15) << 23;
  float f;
  if (exp == SHIFTED_EXP) {  // inf / NaN
    o += static_cast<uint32_t>(128 - 16) << 23;
    f = bits_float(o);
  } else if (exp == 0) {  // zero / subnormal: renormalise with one exact float subtraction
    o += 1u << 23;
    f = bits_float(o) - bits_float(113u << 23);
  } else {
    f = bits_float(o);
  }
  return bits_float(float_bits(f) | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

// ---- storage types -------------------------------------------------------------

// The two encodings, as policies for Storage16.
struct Bf16Format {
  HD static uint16_t encode(float f) { return float_to_bf16_bits(f); }
  HD static float decode(uint16_t b) { return bf16_bits_to_float(b); }
};
struct HalfFormat {
  HD static uint16_t encode(float f) { return float_to_half_bits(f); }
  HD static float decode(uint16_t b) { return half_bits_to_float(b); }
};

// A 16-bit float in memory. Conversions are explicit so that every rounding
// point in a kernel is visible; comparisons go through float (exact).
template <typename Format>
struct Storage16 {
  uint16_t bits;

  // Leaves bits uninitialised on purpose, like a float: the type stays trivial for device buffers.
  // cppcheck-suppress uninitMemberVar
  Storage16() = default;
  template <typename U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  HD explicit Storage16(U v) : bits(Format::encode(static_cast<float>(v))) {}
  HD explicit operator float() const { return Format::decode(bits); }
  HD explicit operator double() const { return static_cast<double>(Format::decode(bits)); }
  HD static Storage16 from_bits(uint16_t b) {
    Storage16 s;
    s.bits = b;
    return s;
  }
  HD friend bool operator>(Storage16 a, Storage16 b) { return float(a) > float(b); }
  HD friend bool operator<(Storage16 a, Storage16 b) { return float(a) < float(b); }
  HD friend bool operator==(Storage16 a, Storage16 b) { return float(a) == float(b); }
};

using Bf16 = Storage16<Bf16Format>;
using Half = Storage16<HalfFormat>;

static_assert(sizeof(Bf16) == 2 && std::is_trivially_copyable_v<Bf16>, "Bf16 must be 2 plain bytes");
static_assert(sizeof(Half) == 2 && std::is_trivially_copyable_v<Half>, "Half must be 2 plain bytes");

// The type kernels compute in for a storage type: double stays double
// (gradient checks), everything else computes in float.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Finite check on the bits (fast-math proof; the same on host and device).
HD bool is_finite_float(float f) { return (float_bits(f) & 0x7f800000u) != 0x7f800000u; }
HD bool is_finite_double(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

}  // namespace hpc::kernels
