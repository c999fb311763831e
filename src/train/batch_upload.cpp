// BatchUpload (see batch_upload.h).
#include "train/batch_upload.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_set>

#include "backend/device.h"
#include "backend/ops.h"

namespace hpc::train {

namespace {

// Pinned when it can be had; page-aligned heap memory otherwise (a pinned
// allocation can fail on a node short of lockable memory: slower, not wrong).
// It remembers which buffers it pinned, since those must go back to CUDA.
class PinnedAllocator final : public data::HostAllocator {
 public:
  void* allocate(size_t bytes) override {
    if (void* p = pinned_alloc(bytes)) {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.insert(p);
      return p;
    }
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pinned_.erase(ptr) == 0) {
        std::free(ptr);
        return;
      }
    }
    pinned_free(ptr);
  }
  const char* name() const override { return "pinned"; }

 private:
  std::mutex mu_;
  std::unordered_set<void*> pinned_;
};

}  // namespace

std::shared_ptr<data::HostAllocator> BatchUpload::host_allocator(Device device) {
  if (device != Device::CUDA) return data::pageable_host_allocator();
  return std::make_shared<PinnedAllocator>();
}

Tensor BatchUpload::upload(const Tensor& host, DType dtype, Tensor& raw, Tensor& converted) {
  if (!raw.defined() || raw.count() != host.count() || raw.dtype() != host.dtype())
    raw = Tensor(host.shape(), host.dtype(), device_);
  backend::copy_async(host, raw.view(host.shape()));
  if (host.dtype() == dtype) return raw.view(host.shape());
  if (!converted.defined() || converted.count() != host.count() || converted.dtype() != dtype)
    converted = Tensor(host.shape(), dtype, device_);
  backend::convert(raw, converted);
  return converted.view(host.shape());
}

std::pair<Tensor, Tensor> BatchUpload::operator()(const data::Batch& batch) {
  if (device_ == Device::CPU && dtype_ == DType::F32 && x_dtype_ == DType::F32) return {batch.x, batch.y};
  const DType y_dtype = batch.y.dtype() == DType::I32 ? DType::I32 : dtype_;
  return {upload(batch.x, x_dtype_, x_raw_, x_model_), upload(batch.y, y_dtype, y_raw_, y_model_)};
}

}  // namespace hpc::train
