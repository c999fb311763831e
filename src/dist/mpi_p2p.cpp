// MpiComm's messages: send and receive between two ranks of its group (see
// communicator.h), for the pipeline's activations and gradients.
//
// MPI_Isend / MPI_Irecv on the communicator's second duplicate (p2p_comm_),
// so that no tag of theirs can match an allreduce's. One tag for all: MPI
// delivers the messages between two ranks in the order they were sent,
// which is the order both ends count them in (send #k from a to b is b's
// receive #k from a: dist/heartbeat.h). A buffer larger than one MPI
// message (max_message) goes in pieces, in order. The wait polls against
// dist.timeout from its own start, so a receive posted ahead of time (the
// pipeline pre-posts them) does not age while nothing waits for it; a peer
// that never sends becomes a PeerError naming the message, the peer and the
// group.
#include <algorithm>
#include <functional>
#include <memory>

#include "core/error.h"
#include "dist/mpi_comm.h"

namespace hpc::dist {

namespace {

constexpr int MESSAGE_TAG = 7;

// One message's requests; wait() runs the communicator's deadline-bounded wait once.
class MpiMessageRequest final : public Request {
 public:
  MpiMessageRequest(std::function<void(std::vector<MPI_Request>&)> wait_all, std::vector<MPI_Request> reqs)
      : wait_all_(std::move(wait_all)), reqs_(std::move(reqs)) {}
  void wait() override {
    if (done_) return;
    done_ = true;
    wait_all_(reqs_);
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    if (flag != 0) wait();  // complete: no blocking
    return flag != 0;
  }

 private:
  std::function<void(std::vector<MPI_Request>&)> wait_all_;
  std::vector<MPI_Request> reqs_;
  bool done_ = false;
};

}  // namespace

WaitPoint MpiComm::begin_message(CollOp op, const Tensor& buf, int peer) {
  HPC_ASSERT(peer >= 0 && peer < size_ && peer != rank_, std::string(coll_op_name(op)) + ": peer " +
                                                             std::to_string(peer) +
                                                             " is not another rank of " + tag_.name);
  HPC_ASSERT(buf.device() == Device::CPU, "MpiComm sends and receives host buffers only");
  std::vector<uint64_t>& counts = op == CollOp::Send ? sends_ : recvs_;
  const WaitPoint at{++counts[static_cast<size_t>(peer)], op, tag_.kind,
                     tag_.ranks[static_cast<size_t>(peer)]};
  if (hb_ != nullptr) {
    hb_->touch();
    hb_->flight().started(at.seq, op, buf.count(), buf.dtype(), "mpi", hb_->step(), tag_.kind, at.peer);
  }
  return at;
}

void MpiComm::end_message(const WaitPoint& at) {
  if (hb_ != nullptr) hb_->flight().completed(at.seq, at.group, at.op, at.peer);
}

std::unique_ptr<Request> MpiComm::start_message(CollOp op, const Tensor& buf, int peer) {
  const WaitPoint at = begin_message(op, buf, peer);
  const MPI_Datatype type = mpi_type(buf.dtype());
  const int64_t es = static_cast<int64_t>(dtype_size(buf.dtype()));
  char* p = static_cast<char*>(buf.raw());
  std::vector<MPI_Request> reqs;
  for (int64_t off = 0; off < buf.count() || (off == 0 && buf.count() == 0); off += max_msg_) {
    const int n = static_cast<int>(std::min(max_msg_, buf.count() - off));
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = op == CollOp::Send ? MPI_Isend(p + off * es, n, type, peer, MESSAGE_TAG, p2p_comm_, &r)
                                      : MPI_Irecv(p + off * es, n, type, peer, MESSAGE_TAG, p2p_comm_, &r);
    if (rc != MPI_SUCCESS)
      fail(at, std::string("failed: ") +
                   MpiCallFailed(rc, op == CollOp::Send ? "MPI_Isend" : "MPI_Irecv").what());
    reqs.push_back(r);
    if (buf.count() == 0) break;
  }
  return std::make_unique<MpiMessageRequest>(
      [this, at](std::vector<MPI_Request>& r) {
        wait_all(r, at);
        end_message(at);
      },
      std::move(reqs));
}

std::unique_ptr<Request> MpiComm::send_async(const Tensor& buf, int peer) {
  return start_message(CollOp::Send, buf, peer);
}

std::unique_ptr<Request> MpiComm::recv_async(const Tensor& buf, int peer) {
  return start_message(CollOp::Recv, buf, peer);
}

}  // namespace hpc::dist
