// Helpers of the language-model tests (test_gpt, test_llama): token
// batches, the whole-model finite-difference check through the sequence
// cross-entropy, and .npy files for the PyTorch cross-checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "backend/ops.h"
#include "core/rng.h"
#include "grad_check.h"
#include "nn/loss.h"
#include "nn/model.h"

namespace hpc::test {

constexpr double GRAD_TOL = 1e-6;  // grad_check.h's: a correct gradient near 1e-9, a wrong term near 1e-2

// Random token ids in [0, vocab) as the model's float input [batch, t].
inline Tensor tokens(int64_t batch, int64_t t, int64_t vocab, DType dtype, uint64_t seed) {
  Tensor ids(Shape{batch, t}, DType::F64);
  Rng rng(seed, 3);
  for (int64_t i = 0; i < ids.count(); ++i) ids.data<double>()[i] = std::floor(rng.uniform() * double(vocab));
  if (dtype == DType::F64) return ids;
  Tensor out(ids.shape(), dtype);
  backend::convert(ids, out);
  return out;
}

inline Tensor next_tokens(const Tensor& ids_f64, int64_t vocab) {
  Tensor t(ids_f64.shape(), DType::I32);
  for (int64_t i = 0; i < t.count(); ++i)
    t.data<int32_t>()[i] = int32_t(std::fmod(ids_f64.data<double>()[i] * 7 + 3, double(vocab)));
  return t;
}

// Finite differences over every parameter of a float64 model whose loss is
// the sequence cross-entropy (sum over tokens / (normalizer·T), as trained).
inline double check_model(const std::string& spec, int64_t t_len, int64_t vocab, int64_t batch) {
  nn::Model m(spec, Shape{t_len}, DType::F64, 11);
  backend::copy(random_tensor(Shape{m.num_params()}, DType::F64, 12, -0.5, 0.5), m.params());
  const Tensor ids = tokens(batch, t_len, vocab, DType::F64, 13);
  const Tensor targets = next_tokens(ids, vocab);
  const double normalizer = 1.5;
  auto ce = nn::make_cross_entropy(0);
  const Tensor dlogits(m.output_shape().with_batch(batch), DType::F64);
  auto loss = [&] {
    const nn::LossStats s = ce->forward_backward(m.forward(ids, {}), targets, batch, normalizer, Tensor());
    EXPECT_EQ(s.count, batch * t_len);
    return s.loss_sum / (normalizer * double(t_len));
  };
  ce->forward_backward(m.forward(ids, {}), targets, batch, normalizer, dlogits);
  m.zero_grads();
  m.backward(dlogits, {});
  double worst = 0;
  double* p = m.params().data<double>();
  for (int64_t i = 0; i < m.num_params(); ++i) {
    const double saved = p[i], h = 1e-5;
    p[i] = saved + h;
    const double up = loss();
    p[i] = saved - h;
    const double down = loss();
    p[i] = saved;
    const double numeric = (up - down) / (2 * h), a = m.grads().data<double>()[i];
    const double err = std::abs(a - numeric) / std::max({std::abs(a), std::abs(numeric), 0.1});
    EXPECT_LT(err, GRAD_TOL) << spec << ": parameter element " << i;
    worst = std::max(worst, err);
  }
  return worst;
}

// Writes a float64 or int32 array as .npy (NumPy's format 1.0) for the PyTorch cross-check.
inline void write_npy(const std::string& path, const Tensor& t) {
  const bool ints = t.dtype() == DType::I32;
  ASSERT_TRUE(ints || t.dtype() == DType::F64);
  std::string shape;
  for (int64_t d : t.shape().dims()) shape += std::to_string(d) + ",";
  std::string header = std::string("{'descr': '") + (ints ? "<i4" : "<f8") +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  const uint16_t len = uint16_t(header.size());
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  std::fwrite(&len, 2, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(t.raw(), 1, t.num_bytes(), f);
  ASSERT_EQ(std::fclose(f), 0);
}

inline Tensor as_f64(const Tensor& t) {
  Tensor out(t.shape(), DType::F64);
  backend::convert(t, out);
  return out;
}

}  // namespace hpc::test
