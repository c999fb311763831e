// NVTX ranges on GPU builds: see dist/nvtx.h.
#include "dist/nvtx.h"

#include <nvtx3/nvToolsExt.h>

namespace hpc::dist {

void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace hpc::dist
