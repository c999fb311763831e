// PipelineStage: one pipeline stage's share of a step (dist.pp > 1) — its
// piece of the model, the micro-batches it holds in flight, and the messages
// to and from its neighbours.
//
// The stage's piece (nn::LayerRange) is the trainer's model; a micro-batch
// in flight needs its own activations and saved state, so the stage holds K
// models over the same parameters (nn::Model::share_params_of), K = the
// schedule's peak of forwards whose backward has not run (P − r for 1F1B:
// pipeline_schedule.h). Micro-batch m runs on model m mod K: its forward
// starts after the backward of m − K, which freed that model.
//
// Messages go over the pp group's communicator (MPI on CPUs, NCCL on GPUs):
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
  // primary: the trainer's model (this stage's piece, storing its buffers); make_model builds another
  // model of the same piece that stores none (StoredRange [0, 0)); in_flight: K; pp: the pp group.
  PipelineStage(nn::Model& primary, const std::function<std::unique_ptr<nn::Model>()>& make_model,
                int in_flight, dist::Communicator& pp, int64_t micro_batch);

  int stage() const { return pp_.rank(); }
  int stages() const { return pp_.size(); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() + 1 == stages(); }
  int in_flight() const { return static_cast<int>(models_.size()); }

  // The model micro-batch m runs on; its sends of an earlier micro-batch are complete when this returns.
  nn::Model& model_for(int micro);
  // The first stage: micro-batch m's input kept in its model's own buffer until its backward (the
  // loader's and the upload's buffers move on to the next micro-batches first).
  const Tensor& keep_input(int micro, const Tensor& x);
  // Blocking receives from the neighbours (not on the first / last stage): micro-batch m's input
  // activation, and the gradient of its output.
  const Tensor& receive_activation(int micro);
  const Tensor& receive_gradient(int micro);
  // What the last receives (or keep_input) left for micro-batch m.
  const Tensor& input(int micro) const { return inputs_[slot(micro)]; }
  const Tensor& output_grad(int micro) const { return output_grads_[slot(micro)]; }
  // Asynchronous sends of micro-batch m's output (not on the last stage) and of its input gradient
  // (not on the first), from its model's own buffers.
  void send_activation(int micro);
  void send_gradient(int micro);
  // Waits for every send in flight (the end of a step).
  void finish_sends();

  // Elements this stage sent per step (activations and gradients), for the start-up lines.
  int64_t elements_sent_per_step(int micro_batches) const;

 private:
  size_t slot(int micro) const { return static_cast<size_t>(micro) % models_.size(); }

  dist::Communicator& pp_;
  std::vector<nn::Model*> models_;                 // models_[0] is the primary
  std::vector<std::unique_ptr<nn::Model>> owned_;  // the others
  std::vector<Tensor> inputs_, output_grads_;      // per model: its input, the gradient it received
  std::vector<std::unique_ptr<dist::Request>> sending_activation_, sending_gradient_;
};

}  // namespace hpc::train
