// The two implementations of every op of ops.def, declared from the table:
// hpc::backend::cpu (backend/cpu/) and hpc::backend::cuda (backend/cuda/, or
// the stubs of backend/nocuda/ in a CPU-only build). Same names, signatures
// and contracts as the public ops; only ops.cpp calls them.
//
// Backend-internal: layers include backend/ops.h. Plain C++ (no CUDA types),
// so the dispatch and the stubs compile without the CUDA headers.
#pragma once

#include "backend/ops.h"

namespace hpc::backend::cpu {
#define HPC_OP(ret, name, params, args, device) ret name params;
#include "backend/ops.def"
#undef HPC_OP
}  // namespace hpc::backend::cpu

namespace hpc::backend::cuda {
#define HPC_OP(ret, name, params, args, device) ret name params;
#include "backend/ops.def"
#undef HPC_OP
}  // namespace hpc::backend::cuda
