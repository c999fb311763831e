// NVTX ranges on GPU builds: see dist/nvtx.h. Host code, compiled by nvcc as nccl_comm.cu is.
#include "dist/nvtx.h"

#include <nvtx3/nvToolsExt.h>

namespace hpc::dist {

void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace hpc::dist
