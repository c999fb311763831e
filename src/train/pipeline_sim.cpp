// The fake-clock pipeline simulator of pipeline_sim.h. Each stage keeps its
// own clock; a receive moves it to the send's time if that is later. Stages
// are advanced in turn until none can move: the clocks come out the same
// whatever the turn order, because every time is a max over its
// dependencies.
#include "train/pipeline_sim.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

namespace hpc::train {
namespace {

struct Message {
  int micro;
  int chunk;  // the sender's chunk
  long time;
};

// One channel per (from, to, gradient?) pair, in send order.
using Channels = std::map<std::tuple<int, int, bool>, std::deque<Message>>;

struct StageState {
  size_t next = 0;
  long clock = 0;
  std::vector<int> forwards, backwards;     // count per micro·V + chunk
  std::vector<bool> have_input, have_grad;  // received, per micro·V + chunk
};

class Simulator {
 public:
  Simulator(const std::vector<std::vector<PipeAction>>& lists, int micro_batches, int virtual_chunks,
            long forward_cost, long backward_cost)
      : lists_(lists),
        stages_(static_cast<int>(lists.size())),
        micro_batches_(micro_batches),
        chunks_(virtual_chunks),
        forward_cost_(forward_cost),
        backward_cost_(backward_cost),
        state_(lists.size()) {
    const size_t slots = static_cast<size_t>(micro_batches) * static_cast<size_t>(virtual_chunks);
    for (StageState& s : state_) {
      s.forwards.assign(slots, 0);
      s.backwards.assign(slots, 0);
      s.have_input.assign(slots, false);
      s.have_grad.assign(slots, false);
    }
  }

  SimResult run() {
    SimResult result;
    bool moved = true;
    while (moved && result.error.empty()) {
      moved = false;
      for (int r = 0; r < stages_ && result.error.empty(); ++r)
        while (state_[r].next < lists_[r].size() && result.error.empty() && step(r, result.error))
          moved = true;
    }
    if (result.error.empty()) result.error = final_check();
    for (int r = 0; r < stages_; ++r) result.makespan = std::max(result.makespan, state_[r].clock);
    for (int r = 0; r < stages_; ++r) {
      result.busy.push_back(busy_[r]);
      result.idle.push_back(result.makespan - busy_[r]);
      result.peak.push_back(peak_in_flight(lists_[r]));
    }
    return result;
  }

 private:
  int virtual_of(int stage, int chunk) const { return chunk * stages_ + stage; }
  size_t slot(const PipeAction& a) const {
    return (static_cast<size_t>(a.micro) * static_cast<size_t>(chunks_)) + static_cast<size_t>(a.chunk);
  }

  std::string where(int r, const PipeAction& a) const {
    return "stage " + std::to_string(r) + " action " + std::to_string(state_[r].next) + " (" + to_string(a) +
           ")";
  }

  // The stage and chunk a message for (stage r, chunk c) comes from.
  std::pair<int, int> producer(int r, int c, bool grad) const {
    const int v = virtual_of(r, c) + (grad ? 1 : -1);
    return {v % stages_, v / stages_};
  }

  // Runs stage r's next action; false when it must wait. Sets error on a fault.
  bool step(int r, std::string& error) {
    StageState& s = state_[r];
    const PipeAction& a = lists_[r][s.next];
    if (a.micro < 0 || a.micro >= micro_batches_ || a.chunk < 0 || a.chunk >= chunks_) {
      error = where(r, a) + ": micro-batch or chunk out of range";
      return false;
    }
    const int v = virtual_of(r, a.chunk);
    const int last = stages_ * chunks_ - 1;
    const size_t k = slot(a);
    switch (a.op) {
      case PipeOp::Forward:
        if (v > 0 && !s.have_input[k]) error = where(r, a) + ": forward before its input arrived";
        ++s.forwards[k];
        s.clock += forward_cost_;
        busy_[r] += forward_cost_;
        break;
      case PipeOp::Backward:
        if (s.forwards[k] == 0) error = where(r, a) + ": backward before its forward";
        if (v < last && !s.have_grad[k])
          error = where(r, a) + ": backward before its output gradient arrived";
        ++s.backwards[k];
        s.clock += backward_cost_;
        busy_[r] += backward_cost_;
        break;
      case PipeOp::SendActivation:
      case PipeOp::SendGrad: {
        const bool grad = a.op == PipeOp::SendGrad;
        if ((grad ? s.backwards[k] : s.forwards[k]) == 0) error = where(r, a) + ": send before its compute";
        const int target_v = v + (grad ? -1 : 1);
        if (target_v < 0 || target_v > last || target_v % stages_ != a.peer_stage)
          error = where(r, a) + ": sends to the wrong stage";
        channels_[{r, a.peer_stage, grad}].push_back({a.micro, a.chunk, s.clock});
        break;
      }
      case PipeOp::RecvActivation:
      case PipeOp::RecvGrad: {
        const bool grad = a.op == PipeOp::RecvGrad;
        const auto [from_stage, from_chunk] = producer(r, a.chunk, grad);
        if (from_chunk < 0 || from_chunk >= chunks_ || from_stage != a.peer_stage) {
          error = where(r, a) + ": receives from the wrong stage";
          return false;
        }
        std::deque<Message>& channel = channels_[{a.peer_stage, r, grad}];
        if (channel.empty()) return false;  // wait for the send
        const Message m = channel.front();
        if (m.micro != a.micro || m.chunk != from_chunk) {
          error = where(r, a) + ": the next message from stage " + std::to_string(a.peer_stage) +
                  " is micro-batch " + std::to_string(m.micro) + " chunk " + std::to_string(m.chunk);
          return false;
        }
        channel.pop_front();
        s.clock = std::max(s.clock, m.time);
        (grad ? s.have_grad : s.have_input)[k] = true;
        break;
      }
    }
    ++s.next;
    return error.empty();
  }

  std::string final_check() const {
    for (int r = 0; r < stages_; ++r)
      if (state_[r].next < lists_[r].size())
        return "deadlock: stage " + std::to_string(r) + " waits at action " + std::to_string(state_[r].next) +
               " (" + to_string(lists_[r][state_[r].next]) + ")";
    for (const auto& [key, channel] : channels_)
      if (!channel.empty())
        return "stage " + std::to_string(std::get<0>(key)) + " sent micro-batch " +
               std::to_string(channel.front().micro) + " to stage " + std::to_string(std::get<1>(key)) +
               " and it was never received";
    for (int r = 0; r < stages_; ++r)
      for (size_t k = 0; k < state_[r].forwards.size(); ++k)
        if (state_[r].forwards[k] != 1 || state_[r].backwards[k] != 1)
          return "stage " + std::to_string(r) + " ran micro-batch " + std::to_string(k / chunks_) +
                 " chunk " + std::to_string(k % chunks_) + " forward " +
                 std::to_string(state_[r].forwards[k]) + " and backward " +
                 std::to_string(state_[r].backwards[k]) + " times (want 1 each)";
    return "";
  }

  const std::vector<std::vector<PipeAction>>& lists_;
  int stages_, micro_batches_, chunks_;
  long forward_cost_, backward_cost_;
  std::vector<StageState> state_;
  std::vector<long> busy_ = std::vector<long>(state_.size(), 0);
  Channels channels_;
};

}  // namespace

SimResult simulate_pipeline(const std::vector<std::vector<PipeAction>>& lists, int micro_batches,
                            int virtual_chunks, long forward_cost, long backward_cost) {
  return Simulator(lists, micro_batches, virtual_chunks, forward_cost, backward_cost).run();
}

}  // namespace hpc::train
