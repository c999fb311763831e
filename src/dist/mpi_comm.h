// MpiComm: the Communicator over MPI for host buffers (CPU nodes).
//
// Averages are computed as a sum followed by one scale, which is exact for
// power-of-two world sizes and equal on every rank otherwise. Non-blocking
// collectives use MPI_Iallreduce; waiting polls MPI_Test so that a peer that
// never arrives turns into a PeerError after `timeout_s` instead of a hang.
#pragma once

#include <mpi.h>

#include "dist/communicator.h"

namespace hpc::dist {

class MpiComm final : public Communicator {
 public:
  MpiComm(MPI_Comm comm, double timeout_s);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void set_timeout(double seconds) { timeout_s_ = seconds; }

  void allreduce(const Tensor& buf, ReduceOp op) override;
  std::unique_ptr<Request> allreduce_async(const Tensor& buf, ReduceOp op) override;
  void broadcast(const Tensor& buf, int root) override;
  void allgather(const Tensor& send, const Tensor& recv) override;
  void barrier() override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
};

MPI_Datatype mpi_type(DType t);

// One-word MPI error check: prints the call, file:line, rank and host, then aborts every rank.
void mpi_fail(int code, const char* call, const char* file, int line);
#define mpiCheck(call)                                                   \
  do {                                                                   \
    int mpi_check_rc_ = (call);                                          \
    if (mpi_check_rc_ != MPI_SUCCESS) ::hpc::dist::mpi_fail(mpi_check_rc_, #call, __FILE__, __LINE__); \
  } while (0)

}  // namespace hpc::dist
