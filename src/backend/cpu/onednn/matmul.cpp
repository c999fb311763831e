// oneDNN matmul for the float32 products where it beats OpenBLAS (onednn.h).
//
// bench_cpu measured both at the models' GEMM shapes (docs/bench-results/cpu.md):
// oneDNN's AVX-512 matmul is 4–22% faster where all three sizes are ≥ 64,
// and up to 1.7× slower on the thin products of a 10-class output layer
// (n or k = 10), where OpenBLAS's small-matrix kernels win. One primitive per
// (transposes, sizes, alpha, beta), made once; alpha is oneDNN's output
// scaling and beta its accumulating post-op, so C = alpha·op(A)·op(B) + beta·C
// as in cblas_sgemm.
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cpu/onednn.h"
#include "backend/cpu/switches.h"
#include "core/error.h"

namespace hpc::backend::cpu::onednn {

namespace {

using dnnl::memory;
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, uint32_t, uint32_t>;

struct Matmul {
  dnnl::matmul primitive;
  memory::desc a, b, c;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

Matmul make(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta) {
  Matmul mm;
  // Row-major operands; a transposed one is the same memory read with swapped strides.
  mm.a = memory::desc({m, k}, memory::data_type::f32, ta ? memory::dims{1, m} : memory::dims{k, 1});
  mm.b = memory::desc({k, n}, memory::data_type::f32, tb ? memory::dims{1, k} : memory::dims{n, 1});
  mm.c = memory::desc({m, n}, memory::data_type::f32, memory::dims{n, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  mm.primitive =
      dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(mm.a, mm.b, mm.c), attr, engine()));
  return mm;
}

}  // namespace

bool matmul_wins(int64_t m, int64_t n, int64_t k) {
  static const bool on = !switched(Switch::Gemm);
  return on && m >= 64 && n >= 64 && k >= 64;
}

void matmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
            float beta, float* c) {
  static std::mutex mutex;
  static std::map<Key, Matmul> cache;
  try {
    Matmul* mm = nullptr;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      const Key key{ta, tb, m, n, k, bits(alpha), bits(beta)};
      auto it = cache.find(key);
      if (it == cache.end()) it = cache.emplace(key, make(ta, tb, m, n, k, alpha, beta)).first;
      mm = &it->second;
    }
    dnnl::stream s(engine());
    memory am(mm->a, engine(), const_cast<float*>(a)), bm(mm->b, engine(), const_cast<float*>(b)),
        cm(mm->c, engine(), c);
    mm->primitive.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    s.wait();
  } catch (const dnnl::error& e) {
    throw Error(EXIT_INTERNAL, std::string("oneDNN matmul failed: ") + e.what());
  }
}

}  // namespace hpc::backend::cpu::onednn
