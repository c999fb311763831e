// Mixed-precision arithmetic shared by the CUDA kernels and the CPU tests:
// gradient unscaling with its non-finite check, and the dynamic loss-scale
// rule for fp16.
//
// fp16 (5 exponent bits) cannot hold gradients much below 2^-24, so the loss
// gradient is multiplied by a scale S before backward and the parameter
// gradients are multiplied by 1/S afterwards (Micikevicius et al. 2018,
// "Mixed Precision Training"). S is adjusted as training goes, with the rule
// of PyTorch's torch.cuda.amp.GradScaler (same defaults, same semantics):
//   - a step whose gradients hold an inf or NaN is skipped and S *= 0.5;
//   - after 2000 consecutive finite steps S *= 2 (unless that overflows).
// bf16 has float's exponent range and needs no scaling (S = 1).
#pragma once

#include <cstdint>

#include "cast_math.h"
#include "hd.h"

namespace hpc::kernels {

struct LossScale {
  float scale = 65536.0f;  // 2^16, GradScaler's init_scale
  int32_t good_steps = 0;  // finite steps since the last change of scale
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int32_t growth_interval = 2000;
};

// After a step: found_nonfinite says whether any gradient was inf or NaN
// (the step was then skipped). Powers of two keep S exact, so 1/S is exact too.
HD void update_loss_scale(LossScale& s, bool found_nonfinite) {
  if (found_nonfinite) {
    s.scale *= s.backoff_factor;
    s.good_steps = 0;
    return;
  }
  if (++s.good_steps < s.growth_interval) return;
  const float grown = s.scale * s.growth_factor;
  if (is_finite_float(grown)) s.scale = grown;
  s.good_steps = 0;
}

// One gradient element: g·(1/S) in float, and whether it is finite. Checking
// the unscaled value catches both an overflow in backward (inf·(1/S) = inf)
// and a NaN.
HD float unscale_grad(float g, float inv_scale, bool& finite) {
  const float u = g * inv_scale;
  finite = is_finite_float(u);
  return u;
}

}  // namespace hpc::kernels
