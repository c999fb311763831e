// CPU implementations of the core ops (ops_core.h). Same contracts.
#pragma once

#include "core/tensor.h"

namespace hpc::backend::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
          const Tensor& b, double beta, const Tensor& c);
void fill(const Tensor& t, double value);
void copy(const Tensor& src, const Tensor& dst);
void convert(const Tensor& src, const Tensor& dst);
void axpy(double alpha, const Tensor& x, const Tensor& y);
void scale(const Tensor& x, double alpha);
double sum_squares(const Tensor& x);
double sum(const Tensor& x);
void add_bias(const Tensor& y, const Tensor& bias, int64_t channels, int64_t spatial);
void bias_grad(const Tensor& dy, const Tensor& dbias, int64_t channels, int64_t spatial);

}  // namespace hpc::backend::cpu

namespace hpc::backend::cpu {
// Sets OpenBLAS's thread count for a rank sharing its node with ranks_on_node
// ranks (see threads.cpp); returns the count.
int configure_threads(int ranks_on_node);
}  // namespace hpc::backend::cpu
