// NcclComm: the Communicator over NCCL for device buffers (see dist/nccl_comm.h).
//
// Host code only (no kernels): compiled by nvcc because it belongs to the
// CUDA build. Threads: the main thread enqueues and waits; the watchdog
// thread only queries (ncclCommGetAsyncError, cudaEventQuery) and, on a
// failure, aborts — both are safe to call concurrently with the main thread,
// and ncclCommAbort is NCCL's documented way to unblock it.
// Flight record (dist/flight_recorder.h): each collective is entered as
// started when enqueued and as completed when the host sees its end event
// (a wait, a test or the watchdog's poll, every 100 ms: the end time is an
// upper bound), so a GPU hang leaves flight files like an MPI one.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/context.h"
#include "core/error.h"
#include "dist/nccl_comm.h"

namespace hpc::dist {

namespace {

constexpr auto WATCHDOG_PERIOD = std::chrono::milliseconds(100);

double now_s() { return monotonic_seconds(); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::U8:
      return ncclUint8;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("NCCL: no type for ") + dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Avg:
      return ncclAvg;  // one division inside NCCL: exact, same bits on every rank
    case ReduceOp::Max:
      return ncclMax;
    default:
      return ncclSum;
  }
}

void check_device(const Tensor& t, const char* what) {
  if (t.device() != Device::CUDA)
    throw Error(EXIT_INTERNAL, std::string("NcclComm::") + what + ": the buffer is not on the GPU");
}

// One enqueued collective (or group): its number, when it was enqueued, and the event that marks its end.
struct Pending {
  uint64_t seq = 0;
  std::vector<WaitPoint>
      points;  // every collective or message of the group (the flight record's), first first
  CollOp op = CollOp::None;
  double enqueued = 0;
  cudaEvent_t done = nullptr;
  std::atomic<bool> complete{false};
  ~Pending() {
    if (done != nullptr) cudaEventDestroy(done);
  }
};

class NcclComm;

class NcclRequest final : public Request {
 public:
  NcclRequest(NcclComm& comm, std::shared_ptr<Pending> p) : comm_(comm), p_(std::move(p)) {}
  void wait() override;
  bool test() override;
  void wait_on_device() override;

 private:
  NcclComm& comm_;
  std::shared_ptr<Pending> p_;
};

class NcclComm final : public Communicator {
 public:
  // existing: a communicator ncclCommSplit made (null: bootstrap one from a unique id over s.host).
  explicit NcclComm(const NcclSetup& s, ncclComm_t existing = nullptr);
  ~NcclComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  const GroupTag& group() const override { return setup_.tag; }
  std::unique_ptr<Communicator> split(int color, int key, const GroupTag& tag) override;
  std::unique_ptr<Request> send_async(const Tensor& buf, int peer) override {
    return std::move(message_group({{true, buf, peer}})[0]);
  }
  std::unique_ptr<Request> recv_async(const Tensor& buf, int peer) override {
    return std::move(message_group({{false, buf, peer}})[0]);
  }
  std::vector<std::unique_ptr<Request>> message_group(const std::vector<Message>& messages) override;

  void allreduce(const Tensor& buf, ReduceOp op) override { allreduce_async(buf, op)->wait(); }
  void allreduce_before_compute(const Tensor& buf, ReduceOp op) override {
    allreduce_async(buf, op)->wait_on_device();
  }
  std::unique_ptr<Request> allreduce_async(const Tensor& buf, ReduceOp op) override {
    return std::move(allreduce_group({buf}, op)[0]);
  }
  std::vector<std::unique_ptr<Request>> allreduce_group(const std::vector<Tensor>& bufs,
                                                        ReduceOp op) override;
  // Uneven shards: one ncclReduce / ncclBroadcast per owner, all in one group (ncclReduceScatter and
  // ncclAllGather need equal counts); same stream and event ordering as the bucket allreduce.
  std::vector<std::unique_ptr<Request>> reduce_scatter_group(
      const std::vector<Tensor>& bufs, ReduceOp op, const std::vector<std::vector<int64_t>>& bounds) override;
  std::unique_ptr<Request> reduce_scatter_async(const Tensor& buf, ReduceOp op,
                                                const std::vector<int64_t>& bounds) override {
    return std::move(reduce_scatter_group({buf}, op, {bounds})[0]);
  }
  std::unique_ptr<Request> allgather_shards_async(const Tensor& buf,
                                                  const std::vector<int64_t>& bounds) override;
  void broadcast(const Tensor& buf, int root) override;
  void allgather(const Tensor& send, const Tensor& recv) override;
  void barrier() override;

  void wait(Pending& p);
  bool test(Pending& p);
  // The compute stream waits for p's end event; the host does not (the watchdog bounds p).
  void order_compute_after(const Pending& p);

 private:
  // The next collective's number; it enters the flight record as started (dist/flight_recorder.h).
  uint64_t next_seq(CollOp op, int64_t count, DType dtype) {
    if (hb_ == nullptr) return ++local_seq_;
    const uint64_t seq = hb_->start(setup_.tag.kind);
    hb_->flight().started(seq, op, count, dtype, "nccl", hb_->step(), setup_.tag.kind);
    return seq;
  }
  WaitPoint point(uint64_t seq, CollOp op) const { return {seq, op, setup_.tag.kind, -1}; }
  std::vector<WaitPoint> points(const std::vector<uint64_t>& seqs, CollOp op) const {
    std::vector<WaitPoint> out;
    for (uint64_t q : seqs) out.push_back(point(q, op));
    return out;
  }
  // Marks p complete once; its collectives enter the flight record as completed (when the host saw it).
  void mark_complete(Pending& p) {
    if (p.complete.exchange(true) || hb_ == nullptr) return;
    for (const WaitPoint& w : p.points) hb_->flight().completed(w.seq, w.group, w.op, w.peer);
  }
  void order_after_compute();
  std::shared_ptr<Pending> enqueue_end(std::vector<WaitPoint> points);
  void settle(ncclResult_t r, const WaitPoint& at, const char* call);
  void check_async(const WaitPoint& at);
  // comm_ is used under a shared lock; fatal() aborts and frees it under the exclusive lock.
  template <typename F>
  ncclResult_t with_comm(F&& f) {
    std::shared_lock<std::shared_mutex> lock(comm_mu_);
    return comm_ != nullptr ? f(comm_) : ncclInvalidUsage;
  }
  ncclResult_t async_error();
  std::string last_error();
  [[noreturn]] void fatal(const WaitPoint& at, const std::string& reason);
  void watchdog();

  NcclSetup setup_;  // with this communicator's own group, rank and size
  int rank_, size_, device_;
  double timeout_s_;
  Heartbeat* hb_;
  std::function<void(const GroupTag&, const WaitPoint&, const std::string&)> on_fatal_;
  cudaStream_t compute_ = nullptr;
  std::shared_mutex comm_mu_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the comm stream: owned by the backend context (or the caller)
  cudaEvent_t ready_ = nullptr;    // "the compute stream got this far": the NCCL stream waits on it
  int32_t* one_ = nullptr;         // a device word for barrier()
  uint64_t local_seq_ = 0;

  std::vector<uint64_t> sends_, recvs_;  // messages started, per group rank of the peer
  std::mutex mu_;                        // guards in_flight_
  std::deque<std::shared_ptr<Pending>> in_flight_;
  std::atomic<bool> failing_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

void NcclRequest::wait() { comm_.wait(*p_); }
bool NcclRequest::test() { return comm_.test(*p_); }
void NcclRequest::wait_on_device() { comm_.order_compute_after(*p_); }

NcclComm::NcclComm(const NcclSetup& s, ncclComm_t existing)
    : setup_(s),
      rank_(s.rank),
      size_(s.world),
      device_(s.device),
      timeout_s_(s.timeout_s),
      hb_(s.hb),
      on_fatal_(s.on_fatal) {
  HPC_ASSERT(s.host != nullptr && s.on_fatal, "NcclSetup: host communicator and on_fatal");
  if (setup_.tag.ranks.empty()) setup_.tag = GroupTag::world(size_);
  sends_.assign(static_cast<size_t>(size_), 0);
  recvs_.assign(static_cast<size_t>(size_), 0);
  cudaCheck(cudaSetDevice(device_));
  compute_ = s.compute_stream != nullptr ? static_cast<cudaStream_t>(s.compute_stream)
                                         : backend::cuda::Context::get().compute();
  stream_ = s.comm_stream != nullptr ? static_cast<cudaStream_t>(s.comm_stream)
                                     : backend::cuda::Context::get().comm();
  if (existing != nullptr) {
    comm_ = existing;
    cudaCheck(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    cudaCheck(cudaMalloc(&one_, sizeof(int32_t)));
    thread_ = std::thread([this] { watchdog(); });
    return;
  }
  ncclUniqueId id{};
  if (rank_ == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw UserError(std::string("NCCL: ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  s.host->broadcast(Tensor::borrow(&id, Shape{static_cast<int64_t>(sizeof id)}, DType::U8), 0);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // no NCCL call may block: every one is polled against the deadline
  ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  const double deadline = now_s() + timeout_s_;
  while (r == ncclInProgress) {
    if (now_s() > deadline) {
      ncclCommAbort(comm_);
      throw PeerError("NCCL initialisation did not complete within " +
                      std::to_string(static_cast<int>(timeout_s_)) +
                      " s (dist.timeout): a rank did not join (NCCL_DEBUG=INFO shows why)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm_, &r);
  }
  if (r != ncclSuccess) {
    std::string why =
        std::string(ncclGetErrorString(r)) + (comm_ ? std::string(": ") + ncclGetLastError(comm_) : "");
    if (comm_) ncclCommAbort(comm_);
    throw UserError("NCCL initialisation failed on rank " + std::to_string(rank_) + ": " + why +
                    " (NCCL_DEBUG=INFO shows the details)");
  }
  cudaCheck(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  cudaCheck(cudaMalloc(&one_, sizeof(int32_t)));
  thread_ = std::thread([this] { watchdog(); });
}

NcclComm::~NcclComm() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  in_flight_.clear();
  if (comm_ != nullptr && !failing_) {
    // Finalize flushes outstanding work; non-blocking, so poll it (bounded).
    ncclResult_t r = ncclCommFinalize(comm_);
    const double deadline = now_s() + timeout_s_;
    while (r == ncclInProgress && now_s() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r == ncclSuccess)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
  }
  if (one_ != nullptr) cudaFree(one_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
}

void NcclComm::order_after_compute() {
  cudaCheck(cudaEventRecord(ready_, compute_));
  cudaCheck(cudaStreamWaitEvent(stream_, ready_, 0));
}

std::shared_ptr<Pending> NcclComm::enqueue_end(std::vector<WaitPoint> points) {
  auto p = std::make_shared<Pending>();
  p->seq = points.front().seq;
  p->op = points.front().op;
  p->points = std::move(points);
  p->enqueued = now_s();
  cudaCheck(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
  cudaCheck(cudaEventRecord(p->done, stream_));
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.push_back(p);
  return p;
}

// A non-blocking communicator may answer ncclInProgress: the call is then still being
// set up, and the next NCCL call must wait until the state leaves ncclInProgress.
void NcclComm::settle(ncclResult_t r, const WaitPoint& at, const char* call) {
  const double deadline = now_s() + timeout_s_;
  while (r == ncclInProgress) {
    if (now_s() > deadline)
      fatal(at, std::string(call) + " did not return within " + std::to_string(static_cast<int>(timeout_s_)) +
                    " s (dist.timeout)");
    std::this_thread::yield();
    r = async_error();
  }
  if (r != ncclSuccess)
    fatal(at, std::string(call) + " failed: " + ncclGetErrorString(r) + ": " + last_error());
}

ncclResult_t NcclComm::async_error() {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = with_comm([&](ncclComm_t c) { return ncclCommGetAsyncError(c, &state); });
  return r != ncclSuccess ? r : state;
}

std::string NcclComm::last_error() {
  std::string text;
  with_comm([&](ncclComm_t c) {
    text = ncclGetLastError(c);
    return ncclSuccess;
  });
  return text;
}

void NcclComm::check_async(const WaitPoint& at) {
  ncclResult_t r = async_error();
  if (r != ncclSuccess && r != ncclInProgress)
    fatal(at, std::string("NCCL reported ") + ncclGetErrorString(r) + ": " + last_error());
}

void NcclComm::fatal(const WaitPoint& at, const std::string& reason) {
  if (!failing_.exchange(true)) {
    {
      std::unique_lock<std::shared_mutex> lock(comm_mu_);
      ncclCommAbort(comm_);  // unblocks anything waiting on NCCL; the job is ending
      comm_ = nullptr;
    }
    on_fatal_(setup_.tag, at, reason);
  }
  // Another thread is reporting and will end the process.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

std::vector<std::unique_ptr<Request>> NcclComm::allreduce_group(const std::vector<Tensor>& bufs,
                                                                ReduceOp op) {
  std::vector<std::unique_ptr<Request>> out;
  if (bufs.empty()) return out;
  std::vector<uint64_t> seqs;
  for (const Tensor& b : bufs) {
    check_device(b, "allreduce");
    seqs.push_back(next_seq(CollOp::Allreduce, b.count(), b.dtype()));
  }
  order_after_compute();
  // The group is enqueued under one lock; errors are dealt with after it is closed.
  ncclResult_t first_error = ncclSuccess, end = ncclSuccess;
  with_comm([&](ncclComm_t c) {
    ncclGroupStart();
    for (const Tensor& b : bufs) {
      ncclResult_t r = ncclAllReduce(b.raw(), b.raw(), static_cast<size_t>(b.count()), nccl_type(b.dtype()),
                                     nccl_op(op), c, stream_);
      if (r != ncclSuccess && r != ncclInProgress && first_error == ncclSuccess) first_error = r;
    }
    end = ncclGroupEnd();
    return ncclSuccess;
  });
  if (first_error != ncclSuccess)
    settle(first_error, point(seqs.front(), CollOp::Allreduce), "ncclAllReduce");
  settle(end, point(seqs.front(), CollOp::Allreduce), "ncclGroupEnd");
  // One event ends the whole group; the first collective's number identifies it in reports.
  std::shared_ptr<Pending> p = enqueue_end(points(seqs, CollOp::Allreduce));
  for (size_t i = 0; i < bufs.size(); ++i) out.push_back(std::make_unique<NcclRequest>(*this, p));
  return out;
}

std::vector<std::unique_ptr<Request>> NcclComm::reduce_scatter_group(
    const std::vector<Tensor>& bufs, ReduceOp op, const std::vector<std::vector<int64_t>>& bounds) {
  std::vector<std::unique_ptr<Request>> out;
  if (bufs.empty()) return out;
  HPC_ASSERT(bounds.size() == bufs.size(), "reduce_scatter_group: one set of bounds per buffer");
  std::vector<uint64_t> seqs;
  for (size_t i = 0; i < bufs.size(); ++i) {
    check_device(bufs[i], "reduce_scatter");
    HPC_ASSERT(bounds[i].size() == static_cast<size_t>(size_) + 1 && bounds[i].back() == bufs[i].count(),
               "reduce_scatter: shard bounds do not cut the buffer");
    seqs.push_back(next_seq(CollOp::Allreduce, bufs[i].count(), bufs[i].dtype()));
  }
  order_after_compute();
  ncclResult_t first_error = ncclSuccess, end = ncclSuccess;
  with_comm([&](ncclComm_t c) {
    ncclGroupStart();
    for (size_t i = 0; i < bufs.size(); ++i) {
      const size_t esize = dtype_size(bufs[i].dtype());
      char* base = static_cast<char*>(bufs[i].raw());
      for (int q = 0; q < size_; ++q) {
        const int64_t lo = bounds[i][static_cast<size_t>(q)], hi = bounds[i][static_cast<size_t>(q) + 1];
        if (hi <= lo) continue;
        char* p = base + static_cast<size_t>(lo) * esize;
        ncclResult_t r = ncclReduce(p, p, static_cast<size_t>(hi - lo), nccl_type(bufs[i].dtype()),
                                    nccl_op(op), q, c, stream_);
        if (r != ncclSuccess && r != ncclInProgress && first_error == ncclSuccess) first_error = r;
      }
    }
    end = ncclGroupEnd();
    return ncclSuccess;
  });
  if (first_error != ncclSuccess) settle(first_error, point(seqs.front(), CollOp::Allreduce), "ncclReduce");
  settle(end, point(seqs.front(), CollOp::Allreduce), "ncclGroupEnd");
  std::shared_ptr<Pending> p = enqueue_end(points(seqs, CollOp::Allreduce));
  for (size_t i = 0; i < bufs.size(); ++i) out.push_back(std::make_unique<NcclRequest>(*this, p));
  return out;
}

std::unique_ptr<Request> NcclComm::allgather_shards_async(const Tensor& buf,
                                                          const std::vector<int64_t>& bounds) {
  check_device(buf, "allgather_shards");
  HPC_ASSERT(bounds.size() == static_cast<size_t>(size_) + 1 && bounds.back() == buf.count(),
             "allgather_shards: shard bounds do not cut the buffer");
  const uint64_t seq = next_seq(CollOp::Allgather, buf.count(), buf.dtype());
  order_after_compute();
  ncclResult_t first_error = ncclSuccess, end = ncclSuccess;
  with_comm([&](ncclComm_t c) {
    ncclGroupStart();
    const size_t esize = dtype_size(buf.dtype());
    char* base = static_cast<char*>(buf.raw());
    for (int q = 0; q < size_; ++q) {
      const int64_t lo = bounds[static_cast<size_t>(q)], hi = bounds[static_cast<size_t>(q) + 1];
      if (hi <= lo) continue;
      char* p = base + static_cast<size_t>(lo) * esize;
      ncclResult_t r =
          ncclBroadcast(p, p, static_cast<size_t>(hi - lo), nccl_type(buf.dtype()), q, c, stream_);
      if (r != ncclSuccess && r != ncclInProgress && first_error == ncclSuccess) first_error = r;
    }
    end = ncclGroupEnd();
    return ncclSuccess;
  });
  if (first_error != ncclSuccess) settle(first_error, point(seq, CollOp::Allgather), "ncclBroadcast");
  settle(end, point(seq, CollOp::Allgather), "ncclGroupEnd");
  return std::make_unique<NcclRequest>(*this, enqueue_end({point(seq, CollOp::Allgather)}));
}

void NcclComm::broadcast(const Tensor& buf, int root) {
  check_device(buf, "broadcast");
  const uint64_t seq = next_seq(CollOp::Broadcast, buf.count(), buf.dtype());
  order_after_compute();
  settle(with_comm([&](ncclComm_t c) {
           return ncclBroadcast(buf.raw(), buf.raw(), static_cast<size_t>(buf.count()),
                                nccl_type(buf.dtype()), root, c, stream_);
         }),
         point(seq, CollOp::Broadcast), "ncclBroadcast");
  wait(*enqueue_end({point(seq, CollOp::Broadcast)}));
}

void NcclComm::allgather(const Tensor& send, const Tensor& recv) {
  check_device(send, "allgather");
  check_device(recv, "allgather");
  HPC_ASSERT(recv.count() == send.count() * size_ && recv.dtype() == send.dtype(),
             "allgather: receive buffer");
  const uint64_t seq = next_seq(CollOp::Allgather, send.count(), send.dtype());
  order_after_compute();
  settle(with_comm([&](ncclComm_t c) {
           return ncclAllGather(send.raw(), recv.raw(), static_cast<size_t>(send.count()),
                                nccl_type(send.dtype()), c, stream_);
         }),
         point(seq, CollOp::Allgather), "ncclAllGather");
  wait(*enqueue_end({point(seq, CollOp::Allgather)}));
}

void NcclComm::barrier() {
  const uint64_t seq = next_seq(CollOp::Barrier, 1, DType::I32);
  // A one-word Max (the word never changes): every rank has joined once it completes.
  settle(
      with_comm([&](ncclComm_t c) { return ncclAllReduce(one_, one_, 1, ncclInt32, ncclMax, c, stream_); }),
      point(seq, CollOp::Barrier), "ncclAllReduce");
  wait(*enqueue_end({point(seq, CollOp::Barrier)}));
}

void NcclComm::order_compute_after(const Pending& p) {
  if (p.complete) return;
  check_async(p.points.front());  // a failure already reported is not hidden behind a stream wait
  cudaCheck(cudaStreamWaitEvent(compute_, p.done, 0));
}

bool NcclComm::test(Pending& p) {
  if (p.complete) return true;
  cudaError_t e = cudaEventQuery(p.done);
  if (e == cudaSuccess) {
    mark_complete(p);
    return true;
  }
  if (e != cudaErrorNotReady)
    fatal(p.points.front(), std::string("CUDA error while waiting: ") + cudaGetErrorString(e));
  check_async(p.points.front());
  return false;
}

void NcclComm::wait(Pending& p) {
  if (test(p)) return;
  if (hb_ != nullptr) hb_->wait_begin(p.points.front());
  for (int spins = 0; !test(p); ++spins) {
    if (now_s() - p.enqueued > timeout_s_)
      fatal(p.points.front(),
            "did not complete within " + std::to_string(static_cast<int>(timeout_s_)) + " s (dist.timeout)");
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  if (hb_ != nullptr) hb_->wait_end();
}

void NcclComm::watchdog() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> stop_lock(stop_mu_);
  while (!stop_cv_.wait_for(stop_lock, WATCHDOG_PERIOD, [this] { return stop_; })) {
    stop_lock.unlock();
    std::shared_ptr<Pending> oldest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!in_flight_.empty() &&
             (in_flight_.front()->complete || cudaEventQuery(in_flight_.front()->done) == cudaSuccess)) {
        mark_complete(*in_flight_.front());
        in_flight_.pop_front();
      }
      if (!in_flight_.empty()) oldest = in_flight_.front();
    }
    if (!failing_) {
      ncclResult_t r = async_error();
      if (r != ncclSuccess && r != ncclInProgress)
        fatal(oldest ? oldest->points.front() : WaitPoint{0, CollOp::None, setup_.tag.kind, -1},
              std::string("NCCL reported ") + ncclGetErrorString(r) + ": " + last_error());
      if (oldest && now_s() - oldest->enqueued > timeout_s_)
        fatal(oldest->points.front(), "did not complete within " +
                                          std::to_string(static_cast<int>(timeout_s_)) + " s (dist.timeout)");
    }
    stop_lock.lock();
  }
}

std::unique_ptr<Communicator> NcclComm::split(int color, int key, const GroupTag& tag) {
  // A group of one rank needs no NCCL communicator: it takes no part in the new ones (NOCOLOR), but it
  // must still join the call, which is collective over this communicator.
  const bool alone = color < 0 || tag.ranks.size() <= 1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // polled against the deadline, as every NCCL call here
  ncclComm_t sub = nullptr;
  const WaitPoint at = point(0, CollOp::None);
  ncclResult_t r = with_comm(
      [&](ncclComm_t c) { return ncclCommSplit(c, alone ? NCCL_SPLIT_NOCOLOR : color, key, &sub, &config); });
  const double deadline = now_s() + timeout_s_;
  while (r == ncclInProgress) {
    if (now_s() > deadline)
      fatal(at, "ncclCommSplit did not complete within " + std::to_string(static_cast<int>(timeout_s_)) +
                    " s (dist.timeout)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (sub != nullptr)
      ncclCommGetAsyncError(sub, &r);
    else
      r = async_error();
  }
  if (r != ncclSuccess)
    fatal(at, std::string("ncclCommSplit failed: ") + ncclGetErrorString(r) + ": " + last_error());
  if (color < 0) return nullptr;
  if (alone) return std::make_unique<SelfComm>(tag);
  NcclSetup s = setup_;
  s.tag = tag;
  int n = 0, me = 0;
  ncclCommCount(sub, &n);
  ncclCommUserRank(sub, &me);
  s.world = n;
  s.rank = me;
  return std::make_unique<NcclComm>(s, sub);
}

std::vector<std::unique_ptr<Request>> NcclComm::message_group(const std::vector<Message>& messages) {
  std::vector<std::unique_ptr<Request>> out;
  if (messages.empty()) return out;
  std::vector<WaitPoint> pts;
  for (const Message& m : messages) {
    check_device(m.buf, m.send ? "send" : "recv");
    HPC_ASSERT(m.peer >= 0 && m.peer < size_ && m.peer != rank_,
               "message: peer " + std::to_string(m.peer) + " is not another rank of " + setup_.tag.name);
    std::vector<uint64_t>& counts = m.send ? sends_ : recvs_;
    const CollOp op = m.send ? CollOp::Send : CollOp::Recv;
    const WaitPoint w{++counts[static_cast<size_t>(m.peer)], op, setup_.tag.kind,
                      setup_.tag.ranks[static_cast<size_t>(m.peer)]};
    if (hb_ != nullptr) {
      hb_->touch();
      hb_->flight().started(w.seq, op, m.buf.count(), m.buf.dtype(), "nccl", hb_->step(), w.group, w.peer);
    }
    pts.push_back(w);
  }
  order_after_compute();
  ncclResult_t first_error = ncclSuccess, end = ncclSuccess;
  with_comm([&](ncclComm_t c) {
    ncclGroupStart();
    for (const Message& m : messages) {
      const size_t n = static_cast<size_t>(m.buf.count());
      ncclResult_t r = m.send ? ncclSend(m.buf.raw(), n, nccl_type(m.buf.dtype()), m.peer, c, stream_)
                              : ncclRecv(m.buf.raw(), n, nccl_type(m.buf.dtype()), m.peer, c, stream_);
      if (r != ncclSuccess && r != ncclInProgress && first_error == ncclSuccess) first_error = r;
    }
    end = ncclGroupEnd();
    return ncclSuccess;
  });
  if (first_error != ncclSuccess) settle(first_error, pts.front(), "ncclSend/ncclRecv");
  settle(end, pts.front(), "ncclGroupEnd");
  std::shared_ptr<Pending> p = enqueue_end(pts);
  for (size_t i = 0; i < messages.size(); ++i) out.push_back(std::make_unique<NcclRequest>(*this, p));
  return out;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_comm(const NcclSetup& setup) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw UserError(
        "NCCL: no CUDA device is visible on this node (check CUDA_VISIBLE_DEVICES, --gpus-per-node, "
        "and 'singularity exec --nv')");
  }
  return std::make_unique<NcclComm>(setup);
}

}  // namespace hpc::dist
