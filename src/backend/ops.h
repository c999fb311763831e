// The backend's public interface: every op on tensors, in hpc::backend.
//
// The ops themselves, their contracts and the operands that pick the device
// are listed once, in ops.def; this header turns that table into
// declarations and defines the parameter types the ops take. Layers,
// optimizers and the trainer are written once against these ops and contain
// no device or dtype branches: an op runs on the device of its tensors
// (ops.cpp), in their dtype.
//
// Geometry and activation parameters are the kernels' own plain structs
// (kernels::ConvShape, kernels::PoolShape, kernels::ActivationKind), so the
// CUDA backend hands them to its kernels as they are.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/activation_math.h"
#include "kernels/conv_math.h"
#include "kernels/pool_math.h"

namespace hpc::backend {

// ---- parameter types --------------------------------------------------------------

// A classification loss over a batch: the summed loss and the top-1 / top-5 hits.
struct ClassifyStats {
  double loss_sum = 0;
  int64_t correct1 = 0;
  int64_t correct5 = 0;
};

enum class OptimRule { SGD, ADAM, ADAMW };

struct OptimHyper {
  OptimRule rule = OptimRule::SGD;
  double lr = 0;
  double weight_decay = 0;  // L2 (SGD, Adam) or decoupled (AdamW); applied only where decay = true
  double momentum = 0;      // SGD; 0 = plain SGD (no state buffer)
  bool nesterov = false;    // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  int64_t step = 1;                               // 1-based index of this step (Adam bias correction)
};

// ---- the ops (ops.def) ------------------------------------------------------------

#define HPC_OP(ret, name, params, args, device) ret name params;
#include "backend/ops.def"
#undef HPC_OP

// Not an op (it takes no tensor): the channel block (core/tensor.h) that the
// device's convolutions compute in for activations of `dtype`, which the
// layers between them may then keep: 16 (nChw16c) or 8 (nChw8c) for float32
// on a CPU where oneDNN runs with AVX-512 or AVX2; 0 (plain NCHW) on GPUs,
// for other dtypes, without oneDNN, and with HPCTRAIN_CPU_LAYOUT=nchw.
int64_t channel_block(Device device, DType dtype);

// Not an op either: whether the device's ops fold a relu into the layer
// before it (nn/fusion.h: batchnorm_* with relu, the fused add and relu):
// the CPU, unless HPCTRAIN_CPU_FUSE=none (comparisons, benchmarks); not yet
// the GPU.
bool fuses_relu(Device device);

}  // namespace hpc::backend
