// Watchdog (see watchdog.h).
#include "dist/watchdog.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "dist/mpi_comm.h"

namespace hpc::dist {

namespace {

constexpr int TAG_QUERY = 1;
constexpr int TAG_STATE = 2;
constexpr auto POLL = std::chrono::milliseconds(20);
constexpr double ANSWER_WINDOW_S = 2.0;   // live watchdogs answer within ~20 ms
constexpr double REPORTER_GRACE_S = 5.0;  // non-reporters wait this long for the reporter's abort
constexpr double BACKSTOP_EXTRA_S = 10.0;

}  // namespace

// The answer to "where are you?": the Heartbeat, fixed-size (same binary on every rank).
struct Watchdog::StateMsg {
  int64_t step;
  uint64_t started[GROUP_KINDS];
  uint64_t waiting_on;
  int32_t waiting_op;
  int32_t waiting_group;
  int32_t waiting_peer;
  int32_t pad;
  double state_s;
};

Watchdog::Watchdog(MPI_Comm world, std::vector<PeerInfo> peers, Heartbeat& hb, double timeout_s,
                   bool with_thread)
    : peers_(std::move(peers)), hb_(hb), timeout_s_(timeout_s), with_thread_(with_thread) {
  mpiCheck(MPI_Comm_dup(world, &comm_));
  mpiCheck(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  mpiCheck(MPI_Comm_rank(comm_, &rank_));
  mpiCheck(MPI_Comm_size(comm_, &size_));
  shape_ = GridShape{size_, 1, 1};
  if (with_thread_ && size_ > 1) {
    install_flight_signal();  // SIGUSR2: this thread writes the flight record
    thread_ = std::thread([this] { serve(); });
  }
}

// Past the constructor the watchdog's MPI calls are not mpiCheck'ed, on purpose:
// it talks to ranks that may be dead or stuck, so an error from a peer's
// connection is an answer ("it does not respond"), never a reason to abort,
// and a destructor must not abort either.
Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Watchdog::serve() {
  int query = 0;
  MPI_Request incoming = MPI_REQUEST_NULL;
  MPI_Irecv(&query, 1, MPI_INT, MPI_ANY_SOURCE, TAG_QUERY, comm_, &incoming);
  std::vector<std::pair<MPI_Request, std::unique_ptr<StateMsg>>> replies;
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, POLL, [this] { return stop_; })) {
    lock.unlock();
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&incoming, &flag, &st) == MPI_SUCCESS && flag) {
      auto msg = std::make_unique<StateMsg>();
      msg->step = hb_.step();
      for (int g = 0; g < GROUP_KINDS; ++g) msg->started[g] = hb_.started(static_cast<GroupKind>(g));
      const WaitPoint w = hb_.waiting();
      msg->waiting_on = w.seq;
      msg->waiting_op = static_cast<int32_t>(w.op);
      msg->waiting_group = static_cast<int32_t>(w.group);
      msg->waiting_peer = w.peer;
      msg->pad = 0;
      msg->state_s = hb_.state_seconds();
      MPI_Request r;
      if (MPI_Isend(msg.get(), sizeof(StateMsg), MPI_BYTE, st.MPI_SOURCE, TAG_STATE, comm_, &r) ==
          MPI_SUCCESS)
        replies.emplace_back(r, std::move(msg));
      MPI_Irecv(&query, 1, MPI_INT, MPI_ANY_SOURCE, TAG_QUERY, comm_, &incoming);
      // A peer's collective timed out: this rank's record too, also when its main thread cannot move.
      hb_.flight().dump("rank " + std::to_string(st.MPI_SOURCE) + " asked: a collective timed out there");
    }
    if (flight_signal_pending()) hb_.flight().dump("SIGUSR2");
    for (size_t i = 0; i < replies.size();) {
      int done = 0;
      MPI_Test(&replies[i].first, &done, MPI_STATUS_IGNORE);
      if (done) {
        replies[i] = std::move(replies.back());
        replies.pop_back();
      } else {
        ++i;
      }
    }
    backstop();
    lock.lock();
  }
  lock.unlock();
  MPI_Cancel(&incoming);
  MPI_Wait(&incoming, MPI_STATUS_IGNORE);
  // Replies are 40-byte eager sends and complete at once; one still pending at shutdown went to a
  // rank that is failing: it is left to MPI (with its buffer, a few bytes) rather than waited for.
  const double until = monotonic_seconds() + 0.1;
  for (auto& [r, msg] : replies) {
    int done = 0;
    while (!done && monotonic_seconds() < until) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Request_free(&r);
      static_cast<void>(msg.release());  // the buffer stays with MPI, on purpose (see above)
    }
  }
}

void Watchdog::set_shape(const GridShape& shape) {
  std::lock_guard<std::mutex> lock(shape_mu_);
  shape_ = shape;
}

void Watchdog::backstop() {
  const WaitPoint at = hb_.waiting();
  // While the main thread explains, this thread must stay free to answer the other ranks.
  if (at.seq == 0 || explaining_ || hb_.state_seconds() < timeout_s_.load() + BACKSTOP_EXTRA_S) return;
  // The main thread's own deadline should have fired long ago (it polls); it is blocked somewhere that does
  // not.
  GroupTag group;
  {
    std::lock_guard<std::mutex> lock(shape_mu_);
    group = GroupTag::of(shape_, at.group, rank_);
  }
  std::string text =
      explain(group, at,
              "did not complete within " + std::to_string(static_cast<int>(timeout_s_.load())) +
                  " s (dist.timeout; ended by the watchdog)");
  std::fprintf(stderr, "hpctrain: error on rank %d: %s\n", rank_, text.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, EXIT_PEER);
}

std::vector<PeerState> Watchdog::ask_everyone() {
  std::vector<PeerState> states(static_cast<size_t>(size_));
  PeerState& mine = states[static_cast<size_t>(rank_)];
  mine.answered = true;
  mine.step = hb_.step();
  for (int g = 0; g < GROUP_KINDS; ++g)
    mine.started[static_cast<size_t>(g)] = hb_.started(static_cast<GroupKind>(g));
  const WaitPoint w = hb_.waiting();
  mine.waiting_on = w.seq;
  mine.waiting_op = w.op;
  mine.waiting_group = w.group;
  mine.waiting_peer = w.peer;
  mine.state_s = hb_.state_seconds();

  std::vector<StateMsg> answers(static_cast<size_t>(size_));
  std::vector<MPI_Request> recvs(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  query_out_ = rank_;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    MPI_Irecv(&answers[static_cast<size_t>(q)], sizeof(StateMsg), MPI_BYTE, q, TAG_STATE, comm_,
              &recvs[static_cast<size_t>(q)]);
    MPI_Isend(&query_out_, 1, MPI_INT, q, TAG_QUERY, comm_, &sends[static_cast<size_t>(q)]);
  }
  const double deadline = monotonic_seconds() + ANSWER_WINDOW_S;
  int missing = size_ - 1;
  while (missing > 0 && monotonic_seconds() < deadline) {
    for (int q = 0; q < size_; ++q) {
      MPI_Request& r = recvs[static_cast<size_t>(q)];
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        r = MPI_REQUEST_NULL;  // an error from a dead peer's connection: it does not answer
        --missing;
        continue;
      }
      if (!done) continue;
      const StateMsg& a = answers[static_cast<size_t>(q)];
      PeerState& s = states[static_cast<size_t>(q)];
      s.answered = true;
      s.step = a.step;
      for (size_t g = 0; g < GROUP_KINDS; ++g) s.started[g] = a.started[g];
      s.waiting_on = a.waiting_on;
      s.waiting_op = static_cast<CollOp>(a.waiting_op);
      s.waiting_group = static_cast<GroupKind>(a.waiting_group);
      s.waiting_peer = a.waiting_peer;
      s.state_s = a.state_s;
      --missing;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const std::string& host = peers_[static_cast<size_t>(rank_)].host;
  for (int q = 0; q < size_; ++q) {
    MPI_Request& r = recvs[static_cast<size_t>(q)];
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);  // a cancelled receive completes locally, so nothing writes into answers later
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    // Queries to silent ranks may never complete: MPI keeps them (query_out_ outlives them).
    if (sends[static_cast<size_t>(q)] != MPI_REQUEST_NULL) MPI_Request_free(&sends[static_cast<size_t>(q)]);
    PeerState& s = states[static_cast<size_t>(q)];
    if (!s.answered && peers_[static_cast<size_t>(q)].host == host)
      s.proc = probe_process(peers_[static_cast<size_t>(q)].pid);
  }
  return states;
}

std::string Watchdog::explain(const GroupTag& group_in, const WaitPoint& at, const std::string& reason) {
  explaining_ = true;
  std::lock_guard<std::mutex> lock(explain_mu_);
  if (explained_) return *explained_;
  const bool asked = with_thread_ && size_ > 1;
  std::vector<PeerState> states = asked ? ask_everyone() : std::vector<PeerState>(static_cast<size_t>(size_));
  GridShape shape;
  {
    std::lock_guard<std::mutex> shape_lock(shape_mu_);
    shape = shape_;
  }
  if (shape.world() != size_) shape = GridShape{size_, 1, 1};
  const GroupTag group = group_in.kind == GroupKind::World ? GroupTag::world(size_) : group_in;
  HangReport rep = describe_hang(rank_, group, at, hb_.step(), reason, peers_, states, asked, shape);
  const std::string& flight = hb_.flight().path();
  const std::string what = is_p2p(at.op) ? std::string(coll_op_name(at.op)) + " #" + std::to_string(at.seq) +
                                               (at.op == CollOp::Send ? " to" : " from") + " rank " +
                                               std::to_string(at.peer) + " of " + group.name
                                         : "collective #" + std::to_string(at.seq) +
                                               (group.kind == GroupKind::World ? "" : " of " + group.name) +
                                               " (" + coll_op_name(at.op) + ")";
  if (hb_.flight().dump(what + " " + reason)) {
    const std::string dir = flight.substr(0, flight.rfind('/') + 1);
    rep.text += "; flight records: " + dir + "flight-RANK.json (hpctrain doctor --flight " +
                (dir.empty() ? std::string(".") : dir.substr(0, dir.size() - 1)) + ")";
  }
  if (rep.reporter != rank_) {
    // The reporter prints and aborts the job, which normally ends this process during the pause.
    const double until = monotonic_seconds() + REPORTER_GRACE_S;
    while (monotonic_seconds() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  explained_ = rep.text;
  return rep.text;
}

}  // namespace hpc::dist
