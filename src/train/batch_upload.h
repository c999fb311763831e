// Batches on the training device: the loader's host buffers are pinned when
// training on a GPU, and each batch is copied to the GPU on the transfer stream
// (backend::copy_async), then converted to the model's dtype there.
//
// The copy overlaps the work the GPU still has queued while the host thread
// goes on; compute ops queued later wait for it. It has finished when the
// loss returns its sums to the host (that waits for the compute stream, and
// so for the copy), which is before the trainer asks the loader for the next
// batch and lets a worker refill this one's slot.
//
// On the CPU with a float32 model, batches pass through untouched (the CPU
// path stays exactly what it was).
//
// x goes up in the model's input dtype (nn::Model::input_dtype), which may
// differ from its compute dtype: token ids stay float32 on the GPU.
#pragma once

#include <memory>
#include <utility>

#include "core/tensor.h"
#include "data/loader.h"

namespace hpc::train {

class BatchUpload {
 public:
  BatchUpload(Device device, DType model_dtype, DType x_dtype)
      : device_(device), dtype_(model_dtype), x_dtype_(x_dtype) {}

  // x (in x_dtype), and y (class ids stay int32; float targets take the model's dtype), ready for the model.
  std::pair<Tensor, Tensor> operator()(const data::Batch& batch);

  // Host memory for the loader's buffers: pinned when training on a GPU.
  static std::shared_ptr<data::HostAllocator> host_allocator(Device device);

 private:
  // `host` on the device in `dtype`, through the buffers `raw` (as loaded) and `converted`.
  Tensor upload(const Tensor& host, DType dtype, Tensor& raw, Tensor& converted);

  Device device_;
  DType dtype_, x_dtype_;
  Tensor x_raw_, x_model_, y_raw_, y_model_;
};

}  // namespace hpc::train
