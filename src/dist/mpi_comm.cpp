// MpiComm (see mpi_comm.h).
#include "dist/mpi_comm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.h"

namespace hpc::dist {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    case DType::U8:
      return MPI_UINT8_T;
    case DType::U16:
      return MPI_UINT16_T;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("no MPI type for ") + dtype_name(t));
}

std::string mpi_error_string(int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(msg, static_cast<size_t>(len));
}

namespace {
// x[i] /= world (an average: one division, as in the ordered scheme).
void backend_divide(void* p, int64_t n, DType t, int world) {
  if (t == DType::F32)
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(p)[i] /= static_cast<float>(world);
  else if (t == DType::F64)
    for (int64_t i = 0; i < n; ++i) static_cast<double*>(p)[i] /= static_cast<double>(world);
  else
    throw Error(EXIT_INTERNAL, "allreduce: Avg of integers");
}
constexpr auto HELPER_PERIOD = std::chrono::microseconds(500);
// Background allreduces (buckets) live at a time. On one node, one, in order, like NCCL's stream:
// measured on shared memory, four at once took 1.3–1.9× as long as one after another (each
// bucket's copy, fold and allgather stay in cache when they are not interleaved with three others).
// Across nodes a bucket's time is mostly round trips on the network (each message's rendezvous,
// then the allgather after the reduce-scatter), so the buckets started during backward all go at
// once: their round trips overlap instead of adding up (bench/multinode.sh: at 5 ms of added
// latency, one at a time left 4 buckets' worth of round trips exposed).
constexpr int LIVE_BACKGROUND_ONE_NODE = 1;
constexpr int LIVE_BACKGROUND_ACROSS_NODES = 64;
}  // namespace

// An allreduce: queued (a bucket waiting for the one before it) or live (messages posted, registered
// with its communicator so that any wait, and the progress thread, advances it). Created, advanced
// and destroyed under the communicator's mutex.
class MpiAllreduceRequest final : public Request {
 public:
  // background: started to run alongside computation (a bucket), so the progress thread takes care
  // of it and it queues behind earlier buckets; a blocking allreduce starts at once and is driven by
  // its own wait. Throws MpiCallFailed.
  // bounds: a reduce-scatter over those shards, or with gather an all-gather of them (null: an allreduce).
  MpiAllreduceRequest(MpiComm& comm, const Tensor& buf, ReduceOp op, uint64_t seq, int tag, bool background,
                      const std::vector<int64_t>* bounds, bool gather)
      : comm_(comm), seq_(seq), background_(background), buf_(buf), op_(op), tag_(tag), gather_(gather) {
    if (bounds != nullptr) {
      scatter_ = true;
      bounds_ = *bounds;
    }
    if (background_) ++comm_.background_;
    if (background_ && comm_.live_background_ >= comm_.max_live_background_)
      comm_.queued_.push_back(this);
    else
      launch();
  }
  ~MpiAllreduceRequest() override {
    std::lock_guard<std::mutex> lock(comm_.mu_);
    retire();
    algo_.reset();  // cancels what is still posted (unwinding from a failure), under the lock
  }
  void wait() override {
    comm_.wait_until([this] { return done_.load(); },
                     comm_.point(seq_, gather_ ? CollOp::Allgather : CollOp::Allreduce));
  }
  bool test() override {
    if (!done_) comm_.progress();
    return done_;
  }
  uint64_t seq() const { return seq_; }
  // Posts the first messages (mu_ held). Throws MpiCallFailed.
  void launch() {
    const std::vector<char>* remote = comm_.remote_.empty() ? nullptr : &comm_.remote_;
    algo_ =
        std::make_unique<RankOrderAllreduce>(buf_, op_, comm_.comm_, tag_, comm_.max_msg_, comm_.pool_,
                                             remote, scatter_ ? bounds_ : std::vector<int64_t>{}, gather_);
    comm_.active_.push_back(this);
    if (background_) ++comm_.live_background_;
  }
  // One step of the state machine (mu_ held). Throws MpiCallFailed.
  void advance() {
    if (!done_ && algo_->progress()) {
      done_ = true;
      comm_.end_collective(seq_);
      retire();
    }
  }

 private:
  // Leaves the communicator's lists (once): done, or destroyed early.
  void retire() {
    if (retired_) return;
    retired_ = true;
    auto& a = comm_.active_;
    auto it = std::find(a.begin(), a.end(), this);
    if (it != a.end()) {
      a.erase(it);
      if (background_) --comm_.live_background_;
    }
    auto& q = comm_.queued_;
    q.erase(std::remove(q.begin(), q.end(), this), q.end());
    if (background_) --comm_.background_;
  }
  MpiComm& comm_;
  uint64_t seq_;
  bool background_;
  Tensor buf_;
  ReduceOp op_;
  int tag_;
  bool gather_;
  bool scatter_ = false;
  std::vector<int64_t> bounds_;
  std::unique_ptr<RankOrderAllreduce> algo_;
  std::atomic<bool> done_{false};
  bool retired_ = false;
};

MpiComm::MpiComm(MPI_Comm comm, double timeout_s, Heartbeat* hb, HangHandler* hang, bool progress_thread,
                 GroupTag tag)
    : timeout_s_(timeout_s), hb_(hb), hang_(hang), tag_(std::move(tag)) {
  mpiCheck(MPI_Comm_dup(comm, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  mpiCheck(MPI_Comm_rank(comm_, &rank_));
  mpiCheck(MPI_Comm_size(comm_, &size_));
  if (tag_.ranks.empty()) tag_ = GroupTag::world(size_);  // the default: this communicator is the world
  HPC_ASSERT(static_cast<int>(tag_.ranks.size()) == size_, "MpiComm: the group's ranks are not its size");
  // Messages (send/recv) on a communicator of their own: their tags never meet the allreduces'.
  mpiCheck(MPI_Comm_dup(comm_, &p2p_comm_));
  MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
  sends_.assign(static_cast<size_t>(size_), 0);
  recvs_.assign(static_cast<size_t>(size_), 0);
  void* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub != nullptr) tag_span_ = std::max(1, (*static_cast<int*>(ub) - 1) / 2);
  // Which ranks share my node. All of them (the same answer on every rank): buckets one at a time,
  // messages whole; else buckets all at once, and messages to other nodes in eager-sized pieces.
  MPI_Comm local = MPI_COMM_NULL;
  mpiCheck(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  int local_size = 1;
  mpiCheck(MPI_Comm_size(local, &local_size));
  if (local_size < size_) {
    MPI_Group local_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    mpiCheck(MPI_Comm_group(local, &local_group));
    mpiCheck(MPI_Comm_group(comm_, &group));
    std::vector<int> mine(static_cast<size_t>(local_size)), ranks(static_cast<size_t>(local_size));
    for (int i = 0; i < local_size; ++i) mine[static_cast<size_t>(i)] = i;
    mpiCheck(MPI_Group_translate_ranks(local_group, local_size, mine.data(), group, ranks.data()));
    node_remote_.assign(static_cast<size_t>(size_), 1);
    for (int r : ranks) node_remote_[static_cast<size_t>(r)] = 0;
    MPI_Group_free(&local_group);
    MPI_Group_free(&group);
  }
  MPI_Comm_free(&local);
  set_test_node_size(0);
  progress_ = progress_thread;
  if (progress_thread && size_ > 1) helper_ = std::thread([this] { helper_loop(); });
}

MpiComm::~MpiComm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (helper_.joinable()) helper_.join();
  if (p2p_comm_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiComm::split(int color, int key, const GroupTag& tag) {
  MPI_Comm sub = MPI_COMM_NULL;
  mpiCheck(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub));
  if (sub == MPI_COMM_NULL) return nullptr;
  int n = 0;
  mpiCheck(MPI_Comm_size(sub, &n));
  std::unique_ptr<Communicator> out;
  if (n == 1)
    out = std::make_unique<SelfComm>(tag);
  else
    out = std::make_unique<MpiComm>(sub, timeout_s_, hb_, hang_, progress_ && tag.kind == GroupKind::Dp, tag);
  MPI_Comm_free(&sub);  // the new communicator works on its own duplicate
  return out;
}

void MpiComm::set_test_node_size(int ranks_per_node) {
  std::lock_guard<std::mutex> lock(mu_);
  HPC_ASSERT(active_.empty() && queued_.empty(), "set_test_node_size with allreduces in flight");
  remote_ = node_remote_;
  if (ranks_per_node > 0) {
    remote_.assign(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r)
      remote_[static_cast<size_t>(r)] = r / ranks_per_node != rank_ / ranks_per_node;
  }
  max_live_background_ = remote_.empty() ? LIVE_BACKGROUND_ONE_NODE : LIVE_BACKGROUND_ACROSS_NODES;
}

void MpiComm::helper_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (background_ == 0 || helper_failure_) {
      work_cv_.wait(lock);
      continue;
    }
    if (main_polling_) {
      // The main thread advances everything while it waits; working beside it would only take its
      // core away. No one wakes this thread when the wait ends (a wake-up per bucket cost more than
      // it saved): it looks again a period later.
      work_cv_.wait_for(lock, HELPER_PERIOD, [this] { return stop_; });
      continue;
    }
    // The main thread gets the first period: what completes that fast needs no thread switch
    // (on a rank with one core, waking this thread costs the computation a context switch).
    work_cv_.wait_for(lock, HELPER_PERIOD, [this] { return stop_ || main_polling_; });
    if (!stop_ && background_ > 0 && !main_polling_)
      if (std::optional<Failure> f = advance_all_locked()) helper_failure_ = f;
  }
}

std::optional<MpiComm::Failure> MpiComm::advance_all_locked() {
  if (helper_failure_) return helper_failure_;
  // A copy: requests that complete remove themselves from active_.
  std::vector<MpiAllreduceRequest*> now = active_;
  for (MpiAllreduceRequest* r : now) {
    try {
      r->advance();
    } catch (const MpiCallFailed& e) {
      return Failure{r->seq(), std::string("failed: ") + e.what()};
    }
  }
  // The next buckets in line, now that earlier ones are done (in order: the same on every rank).
  while (!queued_.empty() && live_background_ < max_live_background_) {
    MpiAllreduceRequest* r = queued_.front();
    queued_.pop_front();
    try {
      r->launch();
      r->advance();
    } catch (const MpiCallFailed& e) {
      return Failure{r->seq(), std::string("failed: ") + e.what()};
    }
  }
  return std::nullopt;
}

uint64_t MpiComm::begin_collective(CollOp op, int64_t count, DType dtype) {
  if (hb_ == nullptr) return ++local_seq_;
  const uint64_t seq = hb_->start(tag_.kind);
  hb_->flight().started(seq, op, count, dtype, "mpi", hb_->step(), tag_.kind);
  return seq;
}

void MpiComm::end_collective(uint64_t seq) {
  if (hb_ != nullptr) hb_->flight().completed(seq, tag_.kind);
}

void MpiComm::fail(const WaitPoint& at, const std::string& reason) {
  // Still "waiting" while the ranks compare notes, and after: a peer whose own deadline fires a moment
  // later must still find this rank in #seq (the front), or it would take itself for the reporter and
  // print a second report while this one's is on its way out. The PeerError ends the job; the next
  // collective's wait_begin (in a test that goes on) sets the state afresh.
  std::string what;
  if (hang_ != nullptr)
    what = hang_->explain(tag_, at, reason);
  else if (is_p2p(at.op))
    what = std::string(coll_op_name(at.op)) + " #" + std::to_string(at.seq) +
           (at.op == CollOp::Send ? " to" : " from") + " rank " + std::to_string(at.peer) + " of " +
           tag_.name + " " + reason + ": the peer rank is dead or stuck";
  else
    what = "collective #" + std::to_string(at.seq) +
           (tag_.kind == GroupKind::World ? "" : " of " + tag_.name) + " (" + coll_op_name(at.op) + ") " +
           reason + ": a peer rank is dead or stuck";
  throw PeerError(what);
}

void MpiComm::progress() {
  std::optional<Failure> failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure = advance_all_locked();
  }
  if (failure) fail(point(failure->seq, CollOp::Allreduce), failure->reason);
}

void MpiComm::wait_until(const std::function<bool()>& done, const WaitPoint& at) {
  progress();
  if (done()) return;
  if (hb_ != nullptr) hb_->wait_begin(at);
  // While this thread polls, the progress thread stands aside: two threads polling one core compete.
  struct Polling {
    MpiComm& c;
    explicit Polling(MpiComm& comm) : c(comm) { c.main_polling_ = true; }
    ~Polling() { c.main_polling_ = false; }
  } polling(*this);
  const double t0 = monotonic_seconds();
  for (;;) {
    progress();
    if (done()) break;
    const double waited = monotonic_seconds() - t0;
    if (waited > timeout_s_)
      fail(at,
           "did not complete within " + std::to_string(static_cast<int>(timeout_s_)) + " s (dist.timeout)");
    // Spin while a peer is likely microseconds away, then yield the core (ranks may share cores),
    // then sleep: a rank that waits seconds for a slow peer should not burn a core doing it.
    if (waited < 1e-4) continue;
    if (waited < 5e-3)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(waited < 1.0 ? 50 : 1000));
  }
  if (hb_ != nullptr) hb_->wait_end();
}

void MpiComm::wait_all(std::vector<MPI_Request>& reqs, const WaitPoint& at) {
  wait_until(
      [&] {
        int flag = 0;
        int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) fail(at, std::string("failed: ") + MpiCallFailed(rc, "MPI_Testall").what());
        return flag != 0;
      },
      at);
}

void MpiComm::allreduce(const Tensor& buf, ReduceOp op) { start_allreduce(buf, op, false)->wait(); }

std::unique_ptr<Request> MpiComm::allreduce_async(const Tensor& buf, ReduceOp op) {
  return start_allreduce(buf, op, true);
}

std::unique_ptr<Request> MpiComm::reduce_scatter_async(const Tensor& buf, ReduceOp op,
                                                       const std::vector<int64_t>& bounds) {
  return start_allreduce(buf, op, true, &bounds);
}

namespace {
// A plain MPI collective's requests, waited for against the deadline like every other.
class MpiPlainRequest final : public Request {
 public:
  // then: run once, on the calling thread, when the requests have completed (a division, a move).
  MpiPlainRequest(std::function<void(std::vector<MPI_Request>&)> wait_all, std::vector<MPI_Request> reqs,
                  std::function<void()> then = {})
      : wait_all_(std::move(wait_all)), reqs_(std::move(reqs)), then_(std::move(then)) {}
  // Unwinding with the collective in flight, the job is failing: MPI forbids freeing or cancelling a
  // non-blocking collective's request, so it is left to the abort that follows.
  // wait_all (and then) run exactly once, here or from test().
  void wait() override {
    if (done_) return;
    done_ = true;
    wait_all_(reqs_);
    if (then_) then_();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    if (flag != 0) wait();  // the requests are complete (and null): no blocking
    return flag != 0;
  }

 private:
  std::function<void(std::vector<MPI_Request>&)> wait_all_;
  std::vector<MPI_Request> reqs_;
  std::function<void()> then_;
  bool done_ = false;
};
}  // namespace

std::unique_ptr<Request> MpiComm::allgather_shards_async(const Tensor& buf,
                                                         const std::vector<int64_t>& bounds) {
  HPC_ASSERT(buf.device() == Device::CPU, "MpiComm gathers host buffers only");
  return start_allreduce(buf, ReduceOp::Sum, true, &bounds, true);
}

std::unique_ptr<Request> MpiComm::start_native(const Tensor& buf, ReduceOp op,
                                               const std::vector<int64_t>* bounds) {
  HPC_ASSERT(buf.device() == Device::CPU, "MpiComm reduces host buffers only");
  const uint64_t seq = begin_collective(CollOp::Allreduce, buf.count(), buf.dtype());
  if (buf.count() > max_msg_)
    throw Error(EXIT_INTERNAL, "dist.reduce native: a buffer of " + std::to_string(buf.count()) +
                                   " elements, more than " + std::to_string(max_msg_) +
                                   ", the MPI count limit of one message (use dist.reduce ordered)");
  const MPI_Datatype type = mpi_type(buf.dtype());
  const MPI_Op mop = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  std::vector<MPI_Request> reqs(1);
  char* base = static_cast<char*>(buf.raw());
  const size_t es = dtype_size(buf.dtype());
  int64_t lo = 0, n = buf.count();
  int rc = 0;
  if (bounds == nullptr) {
    rc = MPI_Iallreduce(MPI_IN_PLACE, base, static_cast<int>(n), type, mop, comm_, &reqs[0]);
  } else {
    HPC_ASSERT(bounds->size() == static_cast<size_t>(size_) + 1 && bounds->back() == buf.count(),
               "reduce-scatter: shard bounds do not cut the buffer");
    auto counts = std::make_shared<std::vector<int>>(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      (*counts)[static_cast<size_t>(r)] =
          static_cast<int>((*bounds)[static_cast<size_t>(r) + 1] - (*bounds)[static_cast<size_t>(r)]);
    lo = (*bounds)[static_cast<size_t>(rank_)];
    n = (*counts)[static_cast<size_t>(rank_)];
    // In place, MPI leaves rank r's block at the start of the buffer; it is moved to its offset after.
    rc = MPI_Ireduce_scatter(MPI_IN_PLACE, base, counts->data(), type, mop, comm_, &reqs[0]);
    // The counts must outlive the operation: kept alive by the completion callback below.
    auto then = [base, lo, n, es, op, this, counts, dtype = buf.dtype()] {
      if (lo > 0 && n > 0)
        std::memmove(base + static_cast<size_t>(lo) * es, base, static_cast<size_t>(n) * es);
      if (op == ReduceOp::Avg) backend_divide(base + static_cast<size_t>(lo) * es, n, dtype, size_);
    };
    if (rc != MPI_SUCCESS)
      fail(point(seq, CollOp::Allreduce),
           std::string("failed: ") + MpiCallFailed(rc, "MPI_Ireduce_scatter").what());
    return std::make_unique<MpiPlainRequest>(
        [this, seq](std::vector<MPI_Request>& r) {
          wait_all(r, point(seq, CollOp::Allreduce));
          end_collective(seq);
        },
        std::move(reqs), then);
  }
  if (rc != MPI_SUCCESS)
    fail(point(seq, CollOp::Allreduce), std::string("failed: ") + MpiCallFailed(rc, "MPI_Iallreduce").what());
  auto then = [base, n, op, this, dtype = buf.dtype()] {
    if (op == ReduceOp::Avg) backend_divide(base, n, dtype, size_);
  };
  return std::make_unique<MpiPlainRequest>(
      [this, seq](std::vector<MPI_Request>& r) {
        wait_all(r, point(seq, CollOp::Allreduce));
        end_collective(seq);
      },
      std::move(reqs), then);
}

std::unique_ptr<Request> MpiComm::start_allreduce(const Tensor& buf, ReduceOp op, bool background,
                                                  const std::vector<int64_t>* bounds, bool gather) {
  if (native_ && size_ > 1 && !gather) return start_native(buf, op, bounds);
  // A reduce-scatter is the rank-ordered allreduce restricted to shards: the same collective kind.
  const CollOp kind = gather ? CollOp::Allgather : CollOp::Allreduce;
  const uint64_t seq = begin_collective(kind, buf.count(), buf.dtype());
  const int tag = static_cast<int>(2 * (tags_used_++ % static_cast<uint64_t>(tag_span_)));
  std::unique_ptr<MpiAllreduceRequest> r;
  bool wake = false;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    r = std::make_unique<MpiAllreduceRequest>(*this, buf, op, seq, tag, background, bounds, gather);
    wake = background && background_ == 1;  // the helper sleeps until there is background work
  } catch (const MpiCallFailed& e) {
    fail(point(seq, kind), std::string("failed: ") + e.what());
  }
  if (wake) work_cv_.notify_one();
  progress();
  return r;
}

void MpiComm::broadcast(const Tensor& buf, int root) {
  const uint64_t seq = begin_collective(CollOp::Broadcast, buf.count(), buf.dtype());
  std::vector<MPI_Request> reqs;
  const MPI_Datatype type = mpi_type(buf.dtype());
  char* p = static_cast<char*>(buf.raw());
  for (int64_t off = 0; off < buf.count(); off += max_msg_) {
    const int n = static_cast<int>(std::min(max_msg_, buf.count() - off));
    MPI_Request req;
    int rc = MPI_Ibcast(p + off * static_cast<int64_t>(dtype_size(buf.dtype())), n, type, root, comm_, &req);
    if (rc != MPI_SUCCESS)
      fail(point(seq, CollOp::Broadcast), std::string("failed: ") + MpiCallFailed(rc, "MPI_Ibcast").what());
    reqs.push_back(req);
  }
  wait_all(reqs, point(seq, CollOp::Broadcast));
  end_collective(seq);
}

void MpiComm::allgather(const Tensor& send, const Tensor& recv) {
  HPC_ASSERT(recv.count() == send.count() * size_ && recv.dtype() == send.dtype(),
             "allgather: receive buffer");
  if (send.count() > max_msg_)
    throw Error(EXIT_INTERNAL, "allgather of " + std::to_string(send.count()) +
                                   " elements per rank: more than " + std::to_string(max_msg_) +
                                   ", the MPI count limit of one message");
  const uint64_t seq = begin_collective(CollOp::Allgather, send.count(), send.dtype());
  std::vector<MPI_Request> reqs(1);
  const MPI_Datatype type = mpi_type(send.dtype());
  int rc = MPI_Iallgather(send.raw(), static_cast<int>(send.count()), type, recv.raw(),
                          static_cast<int>(send.count()), type, comm_, &reqs[0]);
  if (rc != MPI_SUCCESS)
    fail(point(seq, CollOp::Allgather), std::string("failed: ") + MpiCallFailed(rc, "MPI_Iallgather").what());
  wait_all(reqs, point(seq, CollOp::Allgather));
  end_collective(seq);
}

void MpiComm::barrier() {
  const uint64_t seq = begin_collective(CollOp::Barrier, 0, DType::F32);
  std::vector<MPI_Request> reqs(1);
  int rc = MPI_Ibarrier(comm_, &reqs[0]);
  if (rc != MPI_SUCCESS)
    fail(point(seq, CollOp::Barrier), std::string("failed: ") + MpiCallFailed(rc, "MPI_Ibarrier").what());
  wait_all(reqs, point(seq, CollOp::Barrier));
  end_collective(seq);
}

std::vector<std::string> MpiComm::gather_text(const std::string& mine, int root) {
  if (mine.size() > static_cast<size_t>(INT_MAX)) throw Error(EXIT_INTERNAL, "gather_text: text too long");
  const uint64_t seq = begin_collective(CollOp::Gather, static_cast<int64_t>(mine.size()), DType::U8);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(size_));
  std::vector<MPI_Request> reqs(1);
  int rc = MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm_, &reqs[0]);
  if (rc != MPI_SUCCESS)
    fail(point(seq, CollOp::Gather), std::string("failed: ") + MpiCallFailed(rc, "MPI_Igather").what());
  wait_all(reqs, point(seq, CollOp::Gather));
  std::vector<int> displs(static_cast<size_t>(size_), 0);
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[static_cast<size_t>(r)] = static_cast<int>(total);
    total += lens[static_cast<size_t>(r)];
  }
  if (rank_ == root && total > INT_MAX) throw Error(EXIT_INTERNAL, "gather_text: texts too long");
  std::string all(static_cast<size_t>(rank_ == root ? total : 0), '\0');
  rc = MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, root, comm_,
                    &reqs[0]);
  if (rc != MPI_SUCCESS)
    fail(point(seq, CollOp::Gather), std::string("failed: ") + MpiCallFailed(rc, "MPI_Igatherv").what());
  wait_all(reqs, point(seq, CollOp::Gather));
  end_collective(seq);
  std::vector<std::string> out;
  if (rank_ != root) return out;
  for (int r = 0; r < size_; ++r)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
  return out;
}

}  // namespace hpc::dist
