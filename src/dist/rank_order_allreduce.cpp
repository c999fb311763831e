// RankOrderAllreduce (see rank_order_allreduce.h).
#include "dist/rank_order_allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace hpc::dist {

namespace {

constexpr int MAX_SLOTS = 8;
// Below this many bytes received per rank, one round (everyone sends everyone everything) beats two.
constexpr int64_t DIRECT_BYTES = int64_t{64} * 1024;

MPI_Datatype reduce_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("allreduce: unsupported dtype ") + dtype_name(t));
}

template <typename T>
T apply(ReduceOp op, T a, T b) {
  return op == ReduceOp::Max ? (a < b ? b : a) : a + b;
}

// into[i] = into[i] ∘ x[i]
template <typename T>
void fold_into_left(ReduceOp op, T* __restrict into, const T* __restrict x, int64_t n) {
  if (op == ReduceOp::Max)
    for (int64_t i = 0; i < n; ++i) into[i] = apply(ReduceOp::Max, into[i], x[i]);
  else
    for (int64_t i = 0; i < n; ++i) into[i] = into[i] + x[i];
}

// into[i] = acc[i] ∘ into[i]  (the running fold comes first: rank order)
template <typename T>
void fold_into_right(ReduceOp op, const T* __restrict acc, T* __restrict into, int64_t n) {
  if (op == ReduceOp::Max)
    for (int64_t i = 0; i < n; ++i) into[i] = apply(ReduceOp::Max, acc[i], into[i]);
  else
    for (int64_t i = 0; i < n; ++i) into[i] = acc[i] + into[i];
}

template <typename F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      f.template operator()<float>();
      return;
    case DType::F64:
      f.template operator()<double>();
      return;
    case DType::I32:
      f.template operator()<int32_t>();
      return;
    default:
      break;
  }
  throw Error(EXIT_INTERNAL, std::string("allreduce: unsupported dtype ") + dtype_name(t));
}

}  // namespace

MpiCallFailed::MpiCallFailed(int code, const char* call)
    : std::runtime_error([&] {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(code, msg, &len);
        return std::string(call) + " failed: " + std::string(msg, static_cast<size_t>(len));
      }()) {}

ScratchPool::Lease& ScratchPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    give_back();
    pool_ = o.pool_;
    buf_ = std::move(o.buf_);
    o.pool_ = nullptr;
  }
  return *this;
}

ScratchPool::Lease::~Lease() { give_back(); }

void ScratchPool::Lease::give_back() noexcept {
  if (pool_ != nullptr && pool_->free_.size() < MAX_FREE) pool_->free_.push_back(std::move(buf_));
  pool_ = nullptr;
  buf_ = std::vector<char>();
}

ScratchPool::Lease ScratchPool::get(size_t bytes) {
  // Best fit among the free buffers, else the largest one grown, else a new one.
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].size() >= bytes && (best == free_.size() || free_[i].size() < free_[best].size())) best = i;
  if (best == free_.size() && !free_.empty())
    best = static_cast<size_t>(
        std::max_element(free_.begin(), free_.end(), [](auto& a, auto& b) { return a.size() < b.size(); }) -
        free_.begin());
  std::vector<char> buf;
  if (best < free_.size()) {
    buf = std::move(free_[best]);
    free_.erase(free_.begin() + static_cast<ptrdiff_t>(best));
  }
  if (buf.size() < bytes) buf.resize(bytes);
  return Lease(this, std::move(buf));
}

RankOrderAllreduce::RankOrderAllreduce(const Tensor& buf, ReduceOp op, MPI_Comm comm, int tag,
                                       int64_t max_msg, ScratchPool& pool, const std::vector<char>* remote,
                                       std::vector<int64_t> bounds, bool gather_only)
    : base_(static_cast<char*>(buf.raw())),
      n_(buf.count()),
      dtype_(buf.dtype()),
      esize_(dtype_size(buf.dtype())),
      mtype_(reduce_type(buf.dtype())),
      op_(op),
      comm_(comm),
      tag_(tag),
      max_msg_(max_msg),
      remote_msg_(std::min<int64_t>(
          max_msg, std::max<int64_t>(1, REMOTE_PIECE_BYTES / static_cast<int64_t>(dtype_size(buf.dtype()))))),
      remote_(remote),
      bounds_(std::move(bounds)),
      scatter_only_(!bounds_.empty() && !gather_only),
      gather_only_(gather_only) {
  HPC_ASSERT(!gather_only || !bounds_.empty(), "all-gather: shard bounds needed");
  HPC_ASSERT(buf.device() == Device::CPU, "MpiComm reduces host buffers only");
  start(pool);
}

void RankOrderAllreduce::start(ScratchPool& pool) {
  if (op_ == ReduceOp::Avg && dtype_ == DType::I32) throw Error(EXIT_INTERNAL, "allreduce: Avg of integers");
  MPI_Comm_rank(comm_, &r_);
  MPI_Comm_size(comm_, &p_);
  if (scatter_only_ || gather_only_) {
    bool ok = bounds_.size() == static_cast<size_t>(p_) + 1 && bounds_.front() == 0 && bounds_.back() == n_;
    for (size_t i = 1; ok && i < bounds_.size(); ++i) ok = bounds_[i - 1] <= bounds_[i];
    HPC_ASSERT(ok, "reduce-scatter: shard bounds do not cut the buffer of " + std::to_string(n_) +
                       " elements into " + std::to_string(p_) + " shards");
  }
  rs_send_.resize(static_cast<size_t>(p_));
  ag_recv_.resize(static_cast<size_t>(p_));
  ag_send_.resize(static_cast<size_t>(p_));
  slot_of_.assign(static_cast<size_t>(p_), -1);
  if (gather_only_) {
    // Nothing to fold: every chunk's owner sends it to everyone, starting at the next rank up.
    fold_next_ = p_;
    folded_ = true;
    for (int k = 1; k < p_; ++k) {
      const int q = (r_ + k) % p_, from = (r_ + p_ - k) % p_;
      if (count(from) > 0)
        post(ag_recv_[static_cast<size_t>(from)], Kind::AgRecv, from, chunk(from), count(from));
      if (count(r_) > 0) post(ag_send_[static_cast<size_t>(q)], Kind::AgSend, q, chunk(r_), count(r_));
    }
    return;
  }
  direct_ = p_ > 1 && n_ > 0 && n_ * static_cast<int64_t>(esize_) * (p_ - 1) <= DIRECT_BYTES;

  const int64_t mine = incoming();
  for (int q = 0; q < p_; ++q)
    if (q != r_) order_.push_back(q);
  if (mine > 0 && p_ > 1) {
    // With one slot kept for the running fold, at least one must remain for the others.
    const int nslots = std::min<int>(p_ - 1, std::max(2, MAX_SLOTS));
    const size_t slot_bytes = static_cast<size_t>(mine) * esize_;
    scratch_ = pool.get(static_cast<size_t>(nslots + (direct_ ? 1 : 0)) * slot_bytes);
    slots_.resize(static_cast<size_t>(nslots));
    for (int s = 0; s < nslots; ++s) {
      slots_[static_cast<size_t>(s)].data = scratch_.data() + static_cast<size_t>(s) * slot_bytes;
      give_slot(s);
    }
    if (direct_) acc_ = scratch_.data() + static_cast<size_t>(nslots) * slot_bytes;
  }
  // Sends start at the next rank up, so that not every rank queues at rank 0 first.
  for (int k = 1; k < p_; ++k) {
    const int q = (r_ + k) % p_;
    if (direct_)
      post(rs_send_[static_cast<size_t>(q)], Kind::RsSend, q, base_, n_);
    else if (count(q) > 0)
      post(rs_send_[static_cast<size_t>(q)], Kind::RsSend, q, chunk(q), count(q));
  }
}

RankOrderAllreduce::~RankOrderAllreduce() {
  if (live_ == 0) return;
  // Unwinding with messages in flight (the job is failing): receives are cancelled so nothing writes into
  // freed scratch; sends are left to MPI, reading the caller's buffer, which outlives the abort that follows.
  for (size_t i = 0; i < reqs_.size(); ++i) {
    MPI_Request& r = reqs_[i];
    if (r == MPI_REQUEST_NULL) continue;
    const Kind k = owner_[i]->kind;
    if (k == Kind::RsRecv || k == Kind::AgRecv) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
      MPI_Request_free(&r);
    }
  }
}

void RankOrderAllreduce::post(Transfer& t, Kind kind, int peer, char* data, int64_t n) {
  t.kind = kind;
  t.peer = peer;
  t.posted = true;
  t.remaining = 0;
  const bool send = kind == Kind::RsSend || kind == Kind::AgSend;
  const int tag = kind == Kind::RsSend || kind == Kind::RsRecv ? tag_ : tag_ + 1;
  // Both ends cut a message alike: the sender's and the receiver's view of "remote" agree.
  const bool far = remote_ != nullptr && (*remote_)[static_cast<size_t>(peer)] != 0;
  const int64_t piece = far ? remote_msg_ : max_msg_;
  for (int64_t off = 0; off < n; off += piece) {
    const int c = static_cast<int>(std::min(piece, n - off));
    char* p = data + off * static_cast<int64_t>(esize_);
    MPI_Request req;
    int rc = send ? MPI_Isend(p, c, mtype_, peer, tag, comm_, &req)
                  : MPI_Irecv(p, c, mtype_, peer, tag, comm_, &req);
    if (rc != MPI_SUCCESS) throw MpiCallFailed(rc, send ? "MPI_Isend" : "MPI_Irecv");
    reqs_.push_back(req);
    owner_.push_back(&t);
    ++t.remaining;
    ++live_;
  }
}

void RankOrderAllreduce::poll() {
  if (live_ == 0) return;
  completed_.resize(reqs_.size());
  int n = 0;
  int rc =
      MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &n, completed_.data(), MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) throw MpiCallFailed(rc, "MPI_Testsome");
  if (n == MPI_UNDEFINED) return;
  for (int i = 0; i < n; ++i) {
    Transfer& t = *owner_[static_cast<size_t>(completed_[static_cast<size_t>(i)])];
    --live_;
    // Chunk q's result may land only after my send of chunk q (the same memory) has completed.
    if (--t.remaining == 0 && t.kind == Kind::RsSend && !direct_ && !scatter_only_)
      post(ag_recv_[static_cast<size_t>(t.peer)], Kind::AgRecv, t.peer, chunk(t.peer), count(t.peer));
  }
}

// Slot s takes the next contribution in fold order, if any is left.
void RankOrderAllreduce::give_slot(int s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  slot.t = Transfer();
  if (next_post_ >= order_.size()) return;
  const int q = order_[next_post_++];
  slot_of_[static_cast<size_t>(q)] = s;
  post(slot.t, Kind::RsRecv, q, slot.data, incoming());
}

void RankOrderAllreduce::fold(int q) {
  if (direct_) {
    // The whole buffer, into acc_ (the buffer itself is still being sent): the same operations, in the
    // same order, as the owner of each element computes in the two-round scheme.
    const char* x = q == r_ ? base_ : slots_[static_cast<size_t>(slot_of_[static_cast<size_t>(q)])].data;
    if (q == 0)
      std::memcpy(acc_, x, static_cast<size_t>(n_) * esize_);
    else
      dispatch(dtype_, [&]<typename T>() {
        fold_into_left(op_, reinterpret_cast<T*>(acc_), reinterpret_cast<const T*>(x), n_);
      });
    if (q != r_) give_slot(slot_of_[static_cast<size_t>(q)]);
    return;
  }
  const int64_t n = count(r_);
  char* own = chunk(r_);
  if (q == r_) {
    if (r_ > 0) {
      dispatch(dtype_, [&]<typename T>() {
        fold_into_right(op_, reinterpret_cast<const T*>(acc_), reinterpret_cast<T*>(own), n);
      });
      give_slot(slot_of_[0]);  // the running fold lived in rank 0's slot
    }
    return;
  }
  const int s = slot_of_[static_cast<size_t>(q)];
  char* x = slots_[static_cast<size_t>(s)].data;
  if (q == 0) {
    acc_ = x;  // r > 0 here: rank 0's contribution starts the fold; its slot is kept until my turn
    return;
  }
  char* into = q < r_ ? acc_ : own;
  dispatch(dtype_, [&]<typename T>() {
    fold_into_left(op_, reinterpret_cast<T*>(into), reinterpret_cast<const T*>(x), n);
  });
  give_slot(s);
}

void RankOrderAllreduce::finish_chunk() {
  if (op_ != ReduceOp::Avg || p_ == 1) return;
  const int64_t n = direct_ ? n_ : count(r_);
  dispatch(dtype_, [&]<typename T>() {
    T* x = reinterpret_cast<T*>(direct_ ? acc_ : chunk(r_));
    const T div = static_cast<T>(p_);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] / div;
  });
}

bool RankOrderAllreduce::progress() {
  if (done_) return true;
  poll();
  // Reduce-scatter: fold the contributions to my chunk in rank order, as they arrive.
  if (incoming() == 0) fold_next_ = p_;
  while (fold_next_ < p_) {
    const int q = fold_next_;
    if (q != r_) {
      const int s = slot_of_[static_cast<size_t>(q)];
      if (s < 0 || slots_[static_cast<size_t>(s)].t.peer != q || !slots_[static_cast<size_t>(s)].t.done())
        break;
    }
    fold(q);
    ++fold_next_;
  }
  if (fold_next_ == p_ && !folded_) {
    finish_chunk();
    for (int k = 1; k < p_ && count(r_) > 0 && !direct_ && !scatter_only_; ++k) {
      const int q = (r_ + k) % p_;
      post(ag_send_[static_cast<size_t>(q)], Kind::AgSend, q, chunk(r_), count(r_));
    }
    folded_ = true;
    poll();
  }
  // Every allgather receive is posted once its send completed, so nothing live means everything arrived.
  if (folded_ && live_ == 0) {
    if (direct_ && p_ > 1) std::memcpy(base_, acc_, static_cast<size_t>(n_) * esize_);  // the sends are done
    done_ = true;
  }
  return done_;
}

}  // namespace hpc::dist
