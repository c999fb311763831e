// PipelineStage (see pipeline_stage.h).
#include "train/pipeline_stage.h"

#include <utility>

#include "backend/ops.h"
#include "core/error.h"

namespace hpc::train {

PipelineStage::PipelineStage(nn::Model& holder, const std::vector<int64_t>& bases,
                             const std::function<std::unique_ptr<nn::Model>(int chunk)>& make_chunk,
                             const std::vector<int>& in_flight, dist::Communicator& pp, int64_t micro_batch)
    : pp_(pp), bases_(bases) {
  HPC_ASSERT(!bases.empty() && bases.size() == in_flight.size(), "pipeline stage: one base and K per chunk");
  const int chunks = static_cast<int>(bases.size());
  activations_ = gradients_ = &pp;
  if (chunks > 1) {  // collective over the pp group: every stage builds its PipelineStage at set-up
    own_activations_ = pp.split(0, pp.rank(), pp.group());
    own_gradients_ = pp.split(0, pp.rank(), pp.group());
    activations_ = own_activations_.get();
    gradients_ = own_gradients_.get();
  }
  models_.resize(bases.size());
  for (int c = 0; c < chunks; ++c) {
    const int k = in_flight[static_cast<size_t>(c)];
    HPC_ASSERT(k >= 1, "pipeline stage: no micro-batch in flight");
    first_slot_.push_back(slots_.size());
    for (int i = 0; i < k; ++i) {
      if (chunks == 1 && i == 0) {  // one chunk: the holder is its piece and runs
        models_[0].push_back(&holder);
      } else {
        owned_.push_back(make_chunk(c));
        owned_.back()->share_params_of(holder, bases[static_cast<size_t>(c)]);
        models_[static_cast<size_t>(c)].push_back(owned_.back().get());
      }
      const nn::Model& m = *models_[static_cast<size_t>(c)].back();
      Slot slot;
      if (!first(c)) slot.input = Tensor(m.input_shape().with_batch(micro_batch), m.dtype(), m.device());
      if (!last(c))
        slot.output_grad = Tensor(m.output_shape().with_batch(micro_batch), m.dtype(), m.device());
      slots_.push_back(std::move(slot));
    }
  }
}

size_t PipelineStage::at(int micro, int chunk) const {
  const auto c = static_cast<size_t>(chunk);
  return first_slot_[c] + static_cast<size_t>(micro) % models_[c].size();
}

nn::Model& PipelineStage::model_for(int micro, int chunk) {
  Slot& slot = slots_[at(micro, chunk)];
  // Its output and input gradient are about to be overwritten: the sends of micro − K are done first.
  if (slot.sending_activation) std::exchange(slot.sending_activation, nullptr)->wait();
  if (slot.sending_gradient) std::exchange(slot.sending_gradient, nullptr)->wait();
  return model_at(micro, chunk);
}

nn::Model& PipelineStage::model_at(int micro, int chunk) const {
  const auto& models = models_[static_cast<size_t>(chunk)];
  return *models[static_cast<size_t>(micro) % models.size()];
}

const Tensor& PipelineStage::keep_input(int micro, const Tensor& x) {
  HPC_ASSERT(first(), "pipeline: only the first stage reads the data");
  Tensor& buf = slots_[at(micro, 0)].input;
  if (!buf.defined() || buf.shape() != x.shape() || buf.dtype() != x.dtype())
    buf = Tensor(x.shape(), x.dtype(), x.device());
  backend::copy(x, buf);
  return buf;
}

const Tensor& PipelineStage::receive_activation(int micro, int chunk, int peer) {
  HPC_ASSERT(!first(chunk), "pipeline: the first virtual stage receives no activation");
  const Tensor& buf = slots_[at(micro, chunk)].input;
  activations_->recv(buf, peer < 0 ? previous_stage() : peer);
  return buf;
}

const Tensor& PipelineStage::receive_gradient(int micro, int chunk, int peer) {
  HPC_ASSERT(!last(chunk), "pipeline: the last virtual stage receives no gradient");
  const Tensor& buf = slots_[at(micro, chunk)].output_grad;
  gradients_->recv(buf, peer < 0 ? next_stage() : peer);
  return buf;
}

void PipelineStage::send_activation(int micro, int chunk, int peer) {
  HPC_ASSERT(!last(chunk), "pipeline: the last virtual stage sends no activation");
  slots_[at(micro, chunk)].sending_activation =
      activations_->send_async(model_at(micro, chunk).forward_output(), peer < 0 ? next_stage() : peer);
}

void PipelineStage::send_gradient(int micro, int chunk, int peer) {
  HPC_ASSERT(!first(chunk), "pipeline: the first virtual stage sends no gradient");
  slots_[at(micro, chunk)].sending_gradient =
      gradients_->send_async(model_at(micro, chunk).input_grad(), peer < 0 ? previous_stage() : peer);
}

int64_t PipelineStage::activation_bytes(int64_t batch) const {
  int64_t bytes = 0;
  for (const auto& models : models_)
    bytes += static_cast<int64_t>(models.size()) * models.front()->activation_bytes(batch).kept;
  return bytes;
}

void PipelineStage::finish_sends() {
  for (Slot& slot : slots_) {
    if (slot.sending_activation) std::exchange(slot.sending_activation, nullptr)->wait();
    if (slot.sending_gradient) std::exchange(slot.sending_gradient, nullptr)->wait();
  }
}

}  // namespace hpc::train
