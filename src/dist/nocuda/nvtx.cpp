// The CPU-only build's NVTX: there is none (see dist/nvtx.h).
#include "dist/nvtx.h"

namespace hpc::dist {

void nvtx_push(const char*) {}
void nvtx_pop() {}

}  // namespace hpc::dist
