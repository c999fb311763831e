// PipelineStage: one pipeline stage's share of a step (dist.pp > 1) — its
// piece of the model (or its V interleaved chunks, dist.pp_virtual), the
// micro-batches it holds in flight, and the messages to and from its
// neighbours (chunk c of stage P − 1 sends on to chunk c + 1 of stage 0).
//
// The stage's piece (nn::LayerRange) is the trainer's model; a micro-batch
// in flight needs its own activations and saved state, so the stage holds K
// models over the same parameters (nn::Model::share_params_of), K = the
// schedule's peak of forwards whose backward has not run (P − r for 1F1B:
// pipeline_schedule.h), per chunk. Micro-batch m runs on model m mod K of its
// chunk: its forward starts after the backward of m − K, which freed that model.
//
// Messages go over the pp group's communicator (MPI on CPUs, NCCL on GPUs; with
// interleaving one split of it per direction, see activations_):
// an activation forward to stage r + 1, its gradient back to stage r − 1.
// Receives are blocking and sends asynchronous, so no order in which the
// stages reach their calls deadlocks (a blocking send each way would: stage r
// sending activation m + 1 while stage r + 1 sends gradient m). A send's
// buffer is the model's own output (or input gradient), left untouched until
// the send is waited for: before that model runs its next micro-batch, and at
// the end of the step. Every wait keeps the communicator's guarantee: a dead
// or stuck neighbour is a PeerError naming it within dist.timeout.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "nn/model.h"

namespace hpc::train {

class PipelineStage {
 public:
  // holder: the trainer's model (this stage's piece, or with V chunks the layout of all of them,
  // storing the buffers); bases[c]: where chunk c's parameters start in it; make_chunk(c) builds a
  // model of chunk c that stores none (StoredRange [0, 0)); in_flight[c]: K of chunk c. With one
  // chunk the holder runs too (as chunk 0's first model); pp: the pp group.
  PipelineStage(nn::Model& holder, const std::vector<int64_t>& bases,
                const std::function<std::unique_ptr<nn::Model>(int chunk)>& make_chunk,
                const std::vector<int>& in_flight, dist::Communicator& pp, int64_t micro_batch);

  int stage() const { return pp_.rank(); }
  int stages() const { return pp_.size(); }
  int chunks() const { return static_cast<int>(models_.size()); }
  // The first virtual stage (reads the data) and the last (computes the loss).
  bool first(int chunk = 0) const { return stage() == 0 && chunk == 0; }
  bool last(int chunk = 0) const { return stage() + 1 == stages() && chunk + 1 == chunks(); }
  int in_flight(int chunk = 0) const { return static_cast<int>(models_[static_cast<size_t>(chunk)].size()); }
  int64_t base(int chunk) const { return bases_[static_cast<size_t>(chunk)]; }
  bool has_loss() const { return last(chunks() - 1); }
  // Bytes of activations the stage holds at its peak: each chunk's models in flight, b samples each.
  int64_t activation_bytes(int64_t batch) const;

  // The model micro-batch m runs on in `chunk`; its sends of an earlier micro-batch are complete when
  // this returns.
  nn::Model& model_for(int micro, int chunk = 0);
  // The first virtual stage: micro-batch m's input kept in its model's own buffer until its backward
  // (the loader's and the upload's buffers move on to the next micro-batches first).
  const Tensor& keep_input(int micro, const Tensor& x);
  // Blocking receives from stage `peer`: micro-batch m's input activation of `chunk` (not on the first
  // virtual stage), the gradient of its output (not on the last).
  const Tensor& receive_activation(int micro, int chunk = 0, int peer = -1);
  const Tensor& receive_gradient(int micro, int chunk = 0, int peer = -1);
  // What the last receives (or keep_input) left for micro-batch m, and the last virtual stage's loss
  // gradient buffer for it.
  const Tensor& input(int micro, int chunk = 0) const { return slots_[at(micro, chunk)].input; }
  const Tensor& output_grad(int micro, int chunk = 0) const { return slots_[at(micro, chunk)].output_grad; }
  // Asynchronous sends to stage `peer` (-1: the next / previous stage) of micro-batch m's output (not
  // on the last virtual stage) and of its input gradient (not on the first), from its model's own buffers.
  void send_activation(int micro, int chunk = 0, int peer = -1);
  void send_gradient(int micro, int chunk = 0, int peer = -1);
  // Waits for every send in flight (the end of a step).
  void finish_sends();

 private:
  // Per chunk and model in flight: what it received, and its sends in flight.
  struct Slot {
    Tensor input, output_grad;
    std::unique_ptr<dist::Request> sending_activation, sending_gradient;
  };
  size_t at(int micro, int chunk) const;            // micro-batch m's slot in `chunk`
  nn::Model& model_at(int micro, int chunk) const;  // its model (no wait: model_for waits)
  int next_stage() const { return (stage() + 1) % stages(); }
  int previous_stage() const { return (stage() + stages() - 1) % stages(); }

  dist::Communicator& pp_;
  // With several chunks two neighbours exchange activations and gradients both ways (stage P − 1
  // sends activations on to stage 0, which sends gradients back), each kind in the same order on
  // both sides but the kinds interleaved differently: each kind has its own communicator, split from
  // pp_ (messages between two ranks are matched in order; NCCL has no tags). With one chunk: pp_.
  std::unique_ptr<dist::Communicator> own_activations_, own_gradients_;
  dist::Communicator* activations_ = nullptr;
  dist::Communicator* gradients_ = nullptr;
  std::vector<int64_t> bases_;
  std::vector<std::vector<nn::Model*>> models_;    // [chunk][k]
  std::vector<std::unique_ptr<nn::Model>> owned_;  // all of them but the holder
  std::vector<Slot> slots_;                        // [chunk][k], flattened
  std::vector<size_t> first_slot_;                 // of each chunk
};

}  // namespace hpc::train
