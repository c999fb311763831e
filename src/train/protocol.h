// The messages the ranks exchange around a training step — the stop vote,
// a save's outcome, the logging window, a resume's head, an evaluation's
// batch sums — as structs of named fields, and the one place that lays them
// out on the wire.
//
// A message lists its fields in order (`fields()`: member pointers), each a
// double or an int64_t (counts, steps, rank sums, exit codes, flags: exact in
// a double up to 2^53). pack() writes them into an array of doubles, unpack()
// reads them back; the collectives below move that array. Nothing else
// indexes a message's buffer, so adding a field is one line in its struct and
// one in its fields() (test_protocol round-trips every message, and the
// static_assert in pack() fails when a member is missing from fields()).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dist/communicator.h"

namespace hpc::train {

// ---- the messages ------------------------------------------------------------------------

// After every step, summed over the ranks (allreduce): why to stop or checkpoint now.
struct StopVote {
  int64_t usr1_ranks = 0, usr1_rank_sum = 0;  // ranks that got SIGUSR1, and the sum of their ranks
  int64_t term_ranks = 0, term_rank_sum = 0;  // (the sum names the rank when only one got it)
  int64_t deadline_ranks = 0;                 // ranks whose deadline the next step would pass
  int64_t minutes_due_ranks = 0;              // ranks whose ckpt.every_minutes has elapsed
  int64_t write_failure = 0;                  // rank 0: EXIT_IO when a background write found the disk full
  double save_seconds = 0;                    // rank 0: its latest write's duration (the deadline's estimate)
  bool operator==(const StopVote&) const = default;
  static constexpr auto fields() {
    return std::tuple{&StopVote::usr1_ranks,    &StopVote::usr1_rank_sum,  &StopVote::term_ranks,
                      &StopVote::term_rank_sum, &StopVote::deadline_ranks, &StopVote::minutes_due_ranks,
                      &StopVote::write_failure, &StopVote::save_seconds};
  }
};

// Rank 0 to every rank after a save (broadcast).
struct SaveOutcome {
  int64_t saved = 1;      // the snapshot was taken (and, written synchronously, written)
  double seconds = 0;     // how long the save held training up
  int64_t exit_code = 0;  // a failure that must stop the run (EXIT_IO), else 0
  bool operator==(const SaveOutcome&) const = default;
  static constexpr auto fields() {
    return std::tuple{&SaveOutcome::saved, &SaveOutcome::seconds, &SaveOutcome::exit_code};
  }
};

// The peak host memory a synchronous save added on each rank (gathered from every rank).
struct SaveMemory {
  double peak_mb = 0;
  bool operator==(const SaveMemory&) const = default;
  static constexpr auto fields() { return std::tuple{&SaveMemory::peak_mb}; }
};

// Rank 0 to every rank when a run waits for its background write (broadcast).
struct WriteSettlement {
  int64_t exit_code = 0;     // EXIT_IO when the disk was full
  int64_t failed_step = -1;  // the latest write that failed: that snapshot never reached disk
  bool operator==(const WriteSettlement&) const = default;
  static constexpr auto fields() {
    return std::tuple{&WriteSettlement::exit_code, &WriteSettlement::failed_step};
  }
};

// A rank's open logging window: summed over the ranks for the step table (allreduce), one
// row per rank in a checkpoint (allgather at a save, broadcast at a resume).
struct LogWindowSums {
  double loss_sum = 0, count = 0, correct = 0;  // loss summed over items, items, correct top-1
  int64_t steps = 0;                            // optimizer steps in the window
  int64_t step = 0;                             // at a save: the rank's step (all must agree)
  bool operator==(const LogWindowSums&) const = default;
  static constexpr auto fields() {
    return std::tuple{&LogWindowSums::loss_sum, &LogWindowSums::count, &LogWindowSums::correct,
                      &LogWindowSums::steps, &LogWindowSums::step};
  }
};

// Rank 0 to every rank at a resume (broadcast): where the checkpoint it read says to continue.
struct ResumeHead {
  int64_t found = 0;  // 0: no checkpoint, a fresh start (the rest is unset)
  int64_t step = 0, optimizer_steps = 0;
  int64_t has_loss_scaling = 0;  // fp16's scale and counters follow
  double loss_scale = 0;
  int64_t good_steps = 0, skipped_steps = 0, consecutive_skips = 0;
  bool operator==(const ResumeHead&) const = default;
  static constexpr auto fields() {
    return std::tuple{&ResumeHead::found,           &ResumeHead::step,
                      &ResumeHead::optimizer_steps, &ResumeHead::has_loss_scaling,
                      &ResumeHead::loss_scale,      &ResumeHead::good_steps,
                      &ResumeHead::skipped_steps,   &ResumeHead::consecutive_skips};
  }
};

// One evaluation batch's sums (evaluation.cpp): a row per batch in one table, filled by the rank that
// ran the batch and summed over the ranks (each row has one non-zero contribution: exact).
struct EvalBatchSums {
  double loss_sum = 0, count = 0, correct1 = 0, correct5 = 0;
  bool operator==(const EvalBatchSums&) const = default;
  static constexpr auto fields() {
    return std::tuple{&EvalBatchSums::loss_sum, &EvalBatchSums::count, &EvalBatchSums::correct1,
                      &EvalBatchSums::correct5};
  }
};

// Every rank's model at start-up (allgather): all must have built the same one.
struct ModelFingerprint {
  int64_t params = 0;     // parameter count
  int64_t spec_hash = 0;  // hash of the canonical spec, below 2^52
  bool operator==(const ModelFingerprint&) const = default;
  static constexpr auto fields() {
    return std::tuple{&ModelFingerprint::params, &ModelFingerprint::spec_hash};
  }
};

// ---- the wire layout -----------------------------------------------------------------------

template <class M>
inline constexpr size_t wire_size = std::tuple_size_v<decltype(M::fields())>;

template <class M>
using Wire = std::array<double, wire_size<M>>;

template <class M>
Wire<M> pack(const M& m) {
  static_assert(sizeof(M) == wire_size<M> * 8, "every member of a message must be listed in its fields()");
  Wire<M> w{};
  size_t i = 0;
  std::apply([&](auto... field) { ((w[i++] = static_cast<double>(m.*field)), ...); }, M::fields());
  return w;
}

// The same into w[0, wire_size<M>): a row of a larger table of messages.
template <class M>
void pack_into(const M& m, double* w) {
  const Wire<M> packed = pack(m);
  std::copy(packed.begin(), packed.end(), w);
}

template <class M>
M unpack(const double* w) {
  M m;
  size_t i = 0;
  std::apply(
      [&](auto... field) {
        ((m.*field = static_cast<std::remove_reference_t<decltype(m.*field)>>(w[i++])), ...);
      },
      M::fields());
  return m;
}

// ---- the collectives, on messages ------------------------------------------------------------

// Every rank's message, field by field summed over the ranks.
template <class M>
M sum_over_ranks(dist::Communicator& comm, const M& mine) {
  Wire<M> w = pack(mine);
  comm.allreduce(Tensor::borrow(w.data(), Shape{int64_t(w.size())}, DType::F64), dist::ReduceOp::Sum);
  return unpack<M>(w.data());
}

// Root's message on every rank (m is read on root, overwritten elsewhere).
template <class M>
void broadcast(dist::Communicator& comm, M& m, int root) {
  Wire<M> w = pack(m);
  comm.broadcast(Tensor::borrow(w.data(), Shape{int64_t(w.size())}, DType::F64), root);
  m = unpack<M>(w.data());
}

// Every rank's message, by rank, on every rank.
template <class M>
std::vector<M> gather_from_ranks(dist::Communicator& comm, const M& mine) {
  Wire<M> w = pack(mine);
  const int64_t n = int64_t(w.size());
  Tensor all(Shape{n * comm.size()}, DType::F64);
  comm.allgather(Tensor::borrow(w.data(), Shape{n}, DType::F64), all);
  std::vector<M> out;
  out.reserve(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) out.push_back(unpack<M>(all.data<double>() + r * n));
  return out;
}

// Root's messages, one per rank, on every rank (`rows` is read on root, resized and filled elsewhere).
template <class M>
void broadcast_rows(dist::Communicator& comm, std::vector<M>& rows, int root) {
  const int64_t n = int64_t(wire_size<M>), world = comm.size();
  Tensor all(Shape{n * world}, DType::F64);
  if (comm.rank() == root)
    for (int64_t r = 0; r < world; ++r) pack_into(rows[size_t(r)], all.data<double>() + r * n);
  comm.broadcast(all, root);
  rows.clear();
  rows.reserve(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) rows.push_back(unpack<M>(all.data<double>() + r * n));
}

}  // namespace hpc::train
