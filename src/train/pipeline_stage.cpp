// PipelineStage (see pipeline_stage.h).
#include "train/pipeline_stage.h"

#include <utility>

#include "backend/ops.h"
#include "core/error.h"

namespace hpc::train {

PipelineStage::PipelineStage(nn::Model& primary,
                             const std::function<std::unique_ptr<nn::Model>()>& make_model, int in_flight,
                             dist::Communicator& pp, int64_t micro_batch)
    : pp_(pp) {
  HPC_ASSERT(in_flight >= 1, "pipeline stage: no micro-batch in flight");
  models_.push_back(&primary);
  for (int k = 1; k < in_flight; ++k) {
    owned_.push_back(make_model());
    owned_.back()->share_params_of(primary);
    models_.push_back(owned_.back().get());
  }
  const auto k = static_cast<size_t>(in_flight);
  sending_activation_.resize(k);
  sending_gradient_.resize(k);
  for (size_t i = 0; i < k; ++i) {
    if (!first())
      inputs_.emplace_back(primary.input_shape().with_batch(micro_batch), primary.dtype(), primary.device());
    if (!last())
      output_grads_.emplace_back(primary.output_shape().with_batch(micro_batch), primary.dtype(),
                                 primary.device());
  }
}

nn::Model& PipelineStage::model_for(int micro) {
  const size_t k = slot(micro);
  // Its output and input gradient are about to be overwritten: the sends of micro − K are done first.
  if (sending_activation_[k]) std::exchange(sending_activation_[k], nullptr)->wait();
  if (sending_gradient_[k]) std::exchange(sending_gradient_[k], nullptr)->wait();
  return *models_[k];
}

const Tensor& PipelineStage::keep_input(int micro, const Tensor& x) {
  HPC_ASSERT(first(), "pipeline: only the first stage reads the data");
  if (inputs_.empty()) inputs_.resize(models_.size());
  Tensor& buf = inputs_[slot(micro)];
  if (!buf.defined() || buf.shape() != x.shape() || buf.dtype() != x.dtype())
    buf = Tensor(x.shape(), x.dtype(), x.device());
  backend::copy(x, buf);
  return buf;
}

const Tensor& PipelineStage::receive_activation(int micro) {
  HPC_ASSERT(!first(), "pipeline: the first stage receives no activation");
  const Tensor& buf = inputs_[slot(micro)];
  pp_.recv(buf, stage() - 1);
  return buf;
}

const Tensor& PipelineStage::receive_gradient(int micro) {
  HPC_ASSERT(!last(), "pipeline: the last stage receives no gradient");
  const Tensor& buf = output_grads_[slot(micro)];
  pp_.recv(buf, stage() + 1);
  return buf;
}

void PipelineStage::send_activation(int micro) {
  HPC_ASSERT(!last(), "pipeline: the last stage sends no activation");
  const size_t k = slot(micro);
  sending_activation_[k] = pp_.send_async(models_[k]->forward_output(), stage() + 1);
}

void PipelineStage::send_gradient(int micro) {
  HPC_ASSERT(!first(), "pipeline: the first stage sends no gradient");
  const size_t k = slot(micro);
  sending_gradient_[k] = pp_.send_async(models_[k]->input_grad(), stage() - 1);
}

void PipelineStage::finish_sends() {
  for (auto* sends : {&sending_activation_, &sending_gradient_})
    for (auto& r : *sends)
      if (r) std::exchange(r, nullptr)->wait();
}

int64_t PipelineStage::elements_sent_per_step(int micro_batches) const {
  int64_t per_micro = 0;
  if (!last()) per_micro += output_grads_[0].count();  // the activation: the output's shape
  if (!first()) per_micro += inputs_[0].count();       // the input's gradient
  return per_micro * micro_batches;
}

}  // namespace hpc::train
