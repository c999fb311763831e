// Loader: worker threads that gather batches ahead of the trainer.
//
// The trainer asks for a sequence of "items" (one item = one micro-batch of
// this rank) [first, end). Item k lives in slot k mod S of a ring of
// S = prefetch + 1 batch buffers: the trainer holds one (the batch it is
// computing on) while `workers` threads fill up to `prefetch` following
// items. A worker claims the lowest unclaimed item whose slot is free,
// computes its indices with the caller's plan, gathers the samples and marks
// the slot ready; next() hands out items strictly in order. Which thread
// filled a slot, and when, never changes its content: a batch depends only on
// its indices, so training is deterministic for any number of workers.
//
// Errors: a worker that throws (a read error mid-epoch, a bug) stores the
// exception in its slot; workers claim nothing after it; next() returns
// every item before it, then joins the workers and rethrows the exception,
// as the original exception, on the trainer's thread. stop() (also the
// destructor) wakes and joins every worker, so no thread outlives the Loader
// and none waits forever.
//
// Memory: every slot is allocated once through a HostAllocator and
// pre-touched (written) before the first batch, so page faults never land in
// the step. The default allocator is page-aligned heap memory; a CUDA build
// passes one that returns pinned (page-locked) memory, which lets
// host→device copies run asynchronously. That is the only GPU-specific part.
//
// The time next() waits for a batch is measured: it is the trainer's
// `data_ms`, i.e. the I/O the loader did not hide.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace hpc::data {

class Dataset;

// Where batch buffers live. Implementations must be thread-safe.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
  virtual const char* name() const = 0;  // "pageable", "pinned", … for the start-up report
};

// Page-aligned pageable host memory (aligned_alloc / free).
std::shared_ptr<HostAllocator> pageable_host_allocator();

struct LoaderOptions {
  int workers = 2;   // threads (data.workers)
  int prefetch = 4;  // items gathered ahead of the one the trainer holds (data.prefetch)
  std::shared_ptr<HostAllocator> allocator;  // null: pageable_host_allocator()
};

// The tensors of one item: x and y with the leading batch dimension.
struct BatchLayout {
  Shape x_shape;
  DType x_dtype = DType::F32;
  Shape y_shape;
  DType y_dtype = DType::I32;
};

// One item as next() hands it out; valid until the following next(), start() or stop().
struct Batch {
  int64_t item = -1;  // position in the served sequence
  int64_t valid = 0;  // leading rows that are real samples (the rest is masked padding)
  Tensor x, y;
  double wait_s = 0;  // how long next() waited for this item
};

// Fills out[0, rows) with the dataset indices of `item`; returns how many are real samples.
using PlanFn = std::function<int64_t(int64_t item, int64_t* out)>;
// Copies samples idx[0, n) of `item` into x and y (Dataset::gather, or a
// decoding gather whose random draws depend on the item's epoch).
using GatherFn =
    std::function<void(int64_t item, const int64_t* idx, int64_t n, const Tensor& x, const Tensor& y)>;
// Changes the gathered x of `item` in place (data augmentation), in the worker
// thread; must be thread-safe and a function of (item, idx) only.
using TransformFn = std::function<void(int64_t item, const int64_t* idx, int64_t n, const Tensor& x)>;

class Loader {
 public:
  Loader(BatchLayout layout, GatherFn gather, LoaderOptions options);
  // Batches of `rows` samples of `dataset` (x float32; y int32 ids or float32 targets).
  Loader(const Dataset& dataset, int64_t rows, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Applied to every batch after gather (call before start()); empty: none.
  void set_transform(TransformFn transform) { transform_ = std::move(transform); }
  // Serves items [first, end) in order, starting the workers; whatever was
  // being served before is stopped and dropped. `plan` is called from the
  // worker threads (it must be thread-safe) and must outlive the serving.
  void start(int64_t first, int64_t end, PlanFn plan);
  // The next item, waiting for it if needed. Rethrows the exception of a
  // worker that failed on it. Calling it past `end` is an internal error.
  const Batch& next();
  // Wakes and joins the workers and drops prefetched items. Idempotent; never throws.
  void stop() noexcept;

  int64_t position() const;  // the item next() returns next
  int64_t end() const;       // one past the last item being served
  double total_wait_s() const;
  const BatchLayout& layout() const { return layout_; }
  const char* allocator_name() const { return allocator_->name(); }

 private:
  enum class SlotState { Free, Filling, Ready, Failed };
  struct Slot {
    SlotState state = SlotState::Free;
    Batch batch;
    std::vector<int64_t> indices;
    std::exception_ptr error;
    std::shared_ptr<void> x_mem, y_mem;  // freed through the allocator
  };

  void work();
  bool can_claim() const;  // caller holds mutex_

  BatchLayout layout_;
  GatherFn gather_;
  TransformFn transform_;
  int workers_;
  std::shared_ptr<HostAllocator> allocator_;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  PlanFn plan_;
  bool stopping_ = false, failed_ = false;
  int64_t next_claim_ = 0, cursor_ = 0, end_ = 0;
  int held_ = -1;  // slot the trainer holds, or -1
  double total_wait_s_ = 0;
};

}  // namespace hpc::data
