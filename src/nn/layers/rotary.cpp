// Rotary position embeddings' tables and spec arguments (see
// transformer_pieces.h). The angles are computed in double on the host
// (pos·f_i, then cos and sin) and stored in the model's dtype: Hugging Face
// computes them in float32, whose pos·f_i loses ~pos·6e-8 radians, so a
// double table is the exact side of that comparison. Tables grow by
// doubling when decoding runs past them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/ops.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/rotary_args.h"
#include "nn/layers/transformer_pieces.h"

namespace hpc::nn {

void RotaryTables::ensure(int64_t positions, DType dtype, Device device) {
  if (cos_.defined() && rows_ >= positions && cos_.dtype() == dtype && cos_.device() == device) return;
  int64_t rows = std::max<int64_t>(rows_, 1);
  while (rows < positions) rows *= 2;
  const int64_t half = head_dim_ / 2;
  std::vector<double> c(size_t(rows * half)), s(size_t(rows * half));
  for (int64_t i = 0; i < half; ++i) {
    const double f = kernels::rotary_inv_freq(i, head_dim_, cfg_.theta, cfg_.scaling);
    for (int64_t p = 0; p < rows; ++p) {
      c[size_t(p * half + i)] = std::cos(double(p) * f);
      s[size_t(p * half + i)] = std::sin(double(p) * f);
    }
  }
  const Shape shape{rows, half};
  auto upload = [&](std::vector<double>& host) {
    Tensor t(shape, dtype, device);
    const Tensor src = Tensor::borrow(host.data(), shape, DType::F64);
    if (device == Device::CPU) {
      backend::convert(src, t);
    } else {
      const Tensor staged(shape, DType::F64, device);
      backend::copy(src, staged);
      backend::convert(staged, t);
    }
    return t;
  };
  cos_ = upload(c);
  sin_ = upload(s);
  rows_ = rows;
}

Tensor RotaryTables::cos(int64_t from, int64_t count) const {
  return cos_.slice(from * (head_dim_ / 2), Shape{count, head_dim_ / 2});
}
Tensor RotaryTables::sin(int64_t from, int64_t count) const {
  return sin_.slice(from * (head_dim_ / 2), Shape{count, head_dim_ / 2});
}

RotaryConfig read_rotary(ArgReader& r, double default_theta) {
  RotaryConfig c;
  c.theta = r.real_or("theta", default_theta);
  if (c.theta < 0) r.fail("theta must be positive (0: no rotary positions)");
  const double linear = r.real_or("linear", 0), llama3 = r.real_or("llama3", 0);
  const double low = r.real_or("low", 1), high = r.real_or("high", 4), orig = r.real_or("orig", 8192);
  if (linear != 0 && llama3 != 0) r.fail("linear and llama3 are two rope scalings: give one");
  if ((linear != 0 || llama3 != 0) && !c.enabled())
    r.fail("a rope scaling needs rotary positions (theta > 0)");
  if (linear != 0) {
    if (!(linear > 0)) r.fail("linear must be a positive factor");
    c.scaling.kind = kernels::RopeScaling::Kind::Linear;
    c.scaling.factor = linear;
  } else if (llama3 != 0) {
    if (!(llama3 > 0) || !(low > 0) || !(high > low) || !(orig > 0))
      r.fail("llama3 scaling needs llama3 > 0, 0 < low < high and orig > 0");
    c.scaling = {kernels::RopeScaling::Kind::Llama3, llama3, low, high, orig};
  }
  return c;
}

std::string rotary_text(const RotaryConfig& c, double default_theta) {
  std::string s;
  if (c.theta != default_theta) s += ",theta=" + number_text(c.theta);
  switch (c.scaling.kind) {
    case kernels::RopeScaling::Kind::None:
      break;
    case kernels::RopeScaling::Kind::Linear:
      s += ",linear=" + number_text(c.scaling.factor);
      break;
    case kernels::RopeScaling::Kind::Llama3:
      s += ",llama3=" + number_text(c.scaling.factor) + ",low=" + number_text(c.scaling.low_freq_factor) +
           ",high=" + number_text(c.scaling.high_freq_factor) +
           ",orig=" + number_text(c.scaling.original_context);
      break;
  }
  return s;
}

}  // namespace hpc::nn
