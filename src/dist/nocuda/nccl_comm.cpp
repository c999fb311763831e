// The CPU-only build's NCCL: there is none (see dist/nccl_comm.h).
#include "dist/nccl_comm.h"

#include "core/error.h"

namespace hpc::dist {

std::unique_ptr<Communicator> make_nccl_comm(const NcclSetup&) {
  throw UserError(
      "NCCL: this hpctrain was built without CUDA (rebuild with nvcc present, CUDA=1), "
      "or use --dist.backend mpi");
}

}  // namespace hpc::dist
