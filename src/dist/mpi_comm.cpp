// MpiComm (see mpi_comm.h).
#include "dist/mpi_comm.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "backend/ops_core.h"
#include "core/error.h"

namespace hpc::dist {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::U16: return MPI_UINT16_T;
    default: break;
  }
  throw Error(EXIT_INTERNAL, std::string("no MPI type for ") + dtype_name(t));
}

void mpi_fail(int code, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, msg, &len);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = "?";
  gethostname(host, sizeof host);
  std::fprintf(stderr, "hpctrain: rank %d on %s: %s failed: %s (%s:%d)\n", rank, host, call, msg, file, line);
  MPI_Abort(MPI_COMM_WORLD, EXIT_PEER);
  std::abort();
}

namespace {

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// Waits for `req`, polling so that a missing peer becomes an error, not a hang.
void wait_with_deadline(MPI_Request& req, double timeout_s, const char* what) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s);
  int done = 0;
  for (int spins = 0;; ++spins) {
    mpiCheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    // Spin briefly (small collectives finish in microseconds), then back off.
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(spins > 100000 ? 1000 : 20));
    if ((spins & 255) == 0 && clock::now() > deadline)
      throw PeerError(std::string(what) + " did not complete within " + std::to_string(int(timeout_s)) +
                      " s (dist.timeout): a peer rank is dead or stuck");
  }
}

class MpiRequest final : public Request {
 public:
  MpiRequest(const Tensor& buf, ReduceOp op, int size, double timeout_s)
      : buf_(buf), avg_(op == ReduceOp::Avg), size_(size), timeout_s_(timeout_s) {}
  ~MpiRequest() override {
    // A request dropped in flight (an exception unwinding) must not leave MPI writing into freed memory.
    if (req_ != MPI_REQUEST_NULL && !done_) {
      MPI_Cancel(&req_);
      MPI_Request_free(&req_);
    }
  }
  void wait() override {
    if (done_) return;
    wait_with_deadline(req_, timeout_s_, "allreduce");
    finish();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    mpiCheck(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
    if (flag) finish();
    return done_;
  }
  MPI_Request req_ = MPI_REQUEST_NULL;

 private:
  void finish() {
    done_ = true;
    if (avg_ && size_ > 1) backend::scale(buf_, 1.0 / size_);
  }
  Tensor buf_;
  bool avg_;
  int size_;
  double timeout_s_;
  bool done_ = false;
};

}  // namespace

MpiComm::MpiComm(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
  mpiCheck(MPI_Comm_rank(comm_, &rank_));
  mpiCheck(MPI_Comm_size(comm_, &size_));
}

void MpiComm::allreduce(const Tensor& buf, ReduceOp op) { allreduce_async(buf, op)->wait(); }

std::unique_ptr<Request> MpiComm::allreduce_async(const Tensor& buf, ReduceOp op) {
  auto r = std::make_unique<MpiRequest>(buf, op, size_, timeout_s_);
  mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, buf.raw(), static_cast<int>(buf.count()), mpi_type(buf.dtype()),
                          mpi_op(op), comm_, &r->req_));
  return r;
}

void MpiComm::broadcast(const Tensor& buf, int root) {
  MPI_Request req;
  mpiCheck(MPI_Ibcast(buf.raw(), static_cast<int>(buf.count()), mpi_type(buf.dtype()), root, comm_, &req));
  wait_with_deadline(req, timeout_s_, "broadcast");
}

void MpiComm::allgather(const Tensor& send, const Tensor& recv) {
  HPC_ASSERT(recv.count() == send.count() * size_, "allgather: receive buffer size");
  MPI_Request req;
  mpiCheck(MPI_Iallgather(send.raw(), static_cast<int>(send.count()), mpi_type(send.dtype()), recv.raw(),
                          static_cast<int>(send.count()), mpi_type(recv.dtype()), comm_, &req));
  wait_with_deadline(req, timeout_s_, "allgather");
}

void MpiComm::barrier() {
  MPI_Request req;
  mpiCheck(MPI_Ibarrier(comm_, &req));
  wait_with_deadline(req, timeout_s_, "barrier");
}

}  // namespace hpc::dist
