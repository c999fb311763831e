// Helpers for the GPU-vs-CPU tests (test_cuda_ops.cpp, test_cuda_layers.cpp).
//
// The device under test (DUT) is the GPU. Without one the test binaries
// print "SKIPPED: no GPU" and exit 77 (CTest shows them as skipped). With
// --self-check-on-cpu they run every test with the CPU as the DUT (float32
// and float64 only): the comparisons then hold trivially, but every call,
// shape and helper of the tests runs, so a GPU session does not discover a
// bug in the tests themselves.
//
// Tolerance: |dut − ref| ≤ atol + rtol·|ref|, ref computed on the CPU in
// float64 from the DUT's inputs as the DUT's dtype rounded them. Per dtype:
//   float64  1e-12 + 1e-10·|ref|   (order of summation only)
//   float32  1e-6  + 2e-5·|ref|    (FMA contraction, summation order, ≤ 100-term sums)
//   float16  2e-3  + 4e-3·|ref|    (one rounding to 11 bits: 2^-11 ≈ 4.9e-4, plus fp32 inputs of products)
//   bfloat16 1e-2  + 1.6e-2·|ref|  (one rounding to 8 bits: 2^-8 ≈ 3.9e-3, with headroom for ≤ 4 roundings)
// Ops that promise bit-identical results (lowering, pooling, dropout) are
// compared for equality in float32 and float64.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace hpc::test {

struct DeviceUnderTest {
  Device device = Device::CUDA;
  bool self_check = false;
};

inline DeviceUnderTest& dut_state() {
  static DeviceUnderTest d;
  return d;
}
inline Device dut() { return dut_state().device; }
inline bool self_check() { return dut_state().self_check; }

inline std::vector<DType> float_dtypes() {
  if (self_check()) return {DType::F64, DType::F32};
  return {DType::F64, DType::F32, DType::BF16, DType::F16};
}

struct Tol {
  double atol, rtol;
};
inline Tol tol_for(DType d) {
  switch (d) {
    case DType::F64:
      return {1e-12, 1e-10};
    case DType::F32:
      return {1e-6, 2e-5};
    case DType::F16:
      return {2e-3, 4e-3};
    case DType::BF16:
      return {1e-2, 1.6e-2};
    default:
      return {0, 0};
  }
}
constexpr Tol EXACT{0, 0};

// Uniform [lo, hi) values in a host float64 tensor.
inline Tensor random64(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t(s, DType::F64);
  Rng rng(seed, 17);
  for (int64_t i = 0; i < t.count(); ++i) t.data<double>()[i] = lo + (hi - lo) * rng.uniform();
  return t;
}

// A copy of t (any dtype, any device) as a host float64 tensor.
inline Tensor host64(const Tensor& t) {
  Tensor out(t.shape(), DType::F64);
  if (t.device() == Device::CPU) {
    backend::convert(t, out);
    return out;
  }
  if (t.dtype() == DType::F64) {
    backend::copy(t, out);
    return out;
  }
  const Tensor d64(t.shape(), DType::F64, t.device());
  backend::convert(t, d64);
  backend::copy(d64, out);
  return out;
}

// Host float64 values as a DUT tensor of dtype.
inline Tensor on_dut(const Tensor& values64, DType dtype, Device device = dut()) {
  if (device == Device::CPU) {
    Tensor out(values64.shape(), dtype);
    backend::convert(values64, out);
    return out;
  }
  Tensor d64(values64.shape(), DType::F64, device);
  backend::copy(values64, d64);
  if (dtype == DType::F64) return d64;
  Tensor out(values64.shape(), dtype, device);
  backend::convert(d64, out);
  return out;
}

// The values the DUT actually holds after rounding values64 to dtype.
inline Tensor rounded64(const Tensor& values64, DType dtype) { return host64(on_dut(values64, dtype)); }

// A host tensor of dtype with the values of a host float64 tensor.
inline Tensor host_as(const Tensor& values64, DType dtype) {
  Tensor out(values64.shape(), dtype);
  backend::convert(values64, out);
  return out;
}

// A host copy of a non-float tensor (int32, uint8), any device.
inline Tensor host_raw(const Tensor& t) {
  Tensor out(t.shape(), t.dtype());
  backend::copy(t, out);
  return out;
}

inline Tensor raw_on_dut(const Tensor& host) {
  if (dut() == Device::CPU) return host;
  Tensor out(host.shape(), host.dtype(), dut());
  backend::copy(host, out);
  return out;
}

// Expects every element of `got` (any device/dtype) within tol of ref (host float64).
inline void expect_close(const Tensor& got, const Tensor& ref64, Tol tol, const std::string& what) {
  ASSERT_EQ(got.count(), ref64.count()) << what;
  const Tensor g = host64(got);
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < g.count(); ++i) {
    const double a = g.data<double>()[i], r = ref64.data<double>()[i];
    const double err = std::abs(a - r), allowed = tol.atol + tol.rtol * std::abs(r);
    const bool ok = err <= allowed || (std::isnan(a) && std::isnan(r)) || (std::isinf(a) && a == r);
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
      worst = std::max(worst, err / std::max(allowed, 1e-300));
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.count() << " elements out of tolerance (atol "
                    << tol.atol << ", rtol " << tol.rtol << "); first at " << first << ": got "
                    << (first >= 0 ? g.data<double>()[first] : 0) << ", want "
                    << (first >= 0 ? ref64.data<double>()[first] : 0) << "; worst " << worst
                    << "× the allowance";
}

// The arguments every DUT test binary takes, and its exit code when there is nothing to test.
// Returns -1 to go on and run the tests.
inline int setup_device_under_test(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--self-check-on-cpu") == 0) {
      dut_state() = {Device::CPU, true};
      std::printf("self-check: running the GPU tests with the CPU as the device under test\n");
      return -1;
    }
  if (!backend::cuda_built()) {
    std::printf("SKIPPED: this build has no CUDA\n");
    return 77;
  }
  if (backend::cuda_device_count() == 0) {
    std::printf("SKIPPED: no GPU\n");
    return 77;
  }
  backend::cuda_set_device(0);
  const backend::DeviceInfo d = backend::cuda_device_info(0);
  std::printf("device under test: cuda:0 %s (%s)\n", d.name.c_str(), backend::cuda_versions().c_str());
  return -1;
}

}  // namespace hpc::test

// main() of a DUT test binary (linked before gtest_main, so this one is used).
#define HPC_DEVICE_TEST_MAIN()                                         \
  int main(int argc, char** argv) {                                    \
    const int code = ::hpc::test::setup_device_under_test(argc, argv); \
    if (code >= 0) return code;                                        \
    ::testing::InitGoogleTest(&argc, argv);                            \
    return RUN_ALL_TESTS();                                            \
  }
