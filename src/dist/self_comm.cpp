// SelfComm: the communicator of a one-process run.
#include "backend/ops.h"
#include "dist/communicator.h"

namespace hpc::dist {

namespace {
class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

std::unique_ptr<Request> SelfComm::allreduce_async(const Tensor&, ReduceOp) {
  return std::make_unique<DoneRequest>();
}

void SelfComm::allgather(const Tensor& send, const Tensor& recv) {
  backend::copy(send, recv.view(send.shape()));
}

}  // namespace hpc::dist
