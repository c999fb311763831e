// Loader (see the header): the ring of slots, the workers, in-order hand-out.
#include "data/loader.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "data/h5_dataset.h"

namespace hpc::data {

namespace {

class PageableAllocator : public HostAllocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    void* p = std::aligned_alloc(page, (bytes + page - 1) / page * page);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
  const char* name() const override { return "pageable"; }
};

// Allocated through `alloc` and pre-touched; freed through `alloc` by the last owner.
std::shared_ptr<void> host_buffer(const std::shared_ptr<HostAllocator>& alloc, size_t bytes) {
  void* p = alloc->allocate(bytes);
  std::memset(p, 0, bytes);  // pre-touch: the page faults happen here, not in a training step
  return std::shared_ptr<void>(p, [alloc, bytes](void* q) { alloc->deallocate(q, bytes); });
}

BatchLayout layout_for(const Dataset& ds, int64_t rows) {
  const SplitInfo& info = ds.info();
  BatchLayout l;
  l.x_shape = info.sample_shape.with_batch(rows);
  l.x_dtype = DType::F32;
  // One class id per sample (target_shape {}), or a row of them (token windows) or of float targets.
  l.y_shape = info.target_shape.rank() == 0 ? Shape{rows} : info.target_shape.with_batch(rows);
  l.y_dtype = info.classification ? DType::I32 : DType::F32;
  return l;
}

}  // namespace

std::shared_ptr<HostAllocator> pageable_host_allocator() { return std::make_shared<PageableAllocator>(); }

Loader::Loader(BatchLayout layout, GatherFn gather, LoaderOptions options)
    : layout_(std::move(layout)),
      gather_(std::move(gather)),
      workers_(options.workers),
      allocator_(options.allocator ? std::move(options.allocator) : pageable_host_allocator()) {
  HPC_ASSERT(options.workers >= 1 && options.prefetch >= 1, "loader needs a worker and a prefetch slot");
  HPC_ASSERT(layout_.x_shape.rank() >= 1 && layout_.y_shape.rank() >= 1 &&
                 layout_.x_shape[0] == layout_.y_shape[0] && layout_.x_shape[0] > 0,
             "loader batch layout");
  slots_.resize(static_cast<size_t>(options.prefetch) + 1);
  for (Slot& s : slots_) {
    const size_t xb = static_cast<size_t>(layout_.x_shape.count()) * dtype_size(layout_.x_dtype);
    const size_t yb = static_cast<size_t>(layout_.y_shape.count()) * dtype_size(layout_.y_dtype);
    s.x_mem = host_buffer(allocator_, xb);
    s.y_mem = host_buffer(allocator_, yb);
    s.batch.x = Tensor::borrow(s.x_mem.get(), layout_.x_shape, layout_.x_dtype);
    s.batch.y = Tensor::borrow(s.y_mem.get(), layout_.y_shape, layout_.y_dtype);
    s.indices.resize(static_cast<size_t>(layout_.x_shape[0]));
  }
}

Loader::Loader(const Dataset& dataset, int64_t rows, LoaderOptions options)
    : Loader(
          layout_for(dataset, rows),
          [&dataset](int64_t, const int64_t* idx, int64_t n, const Tensor& x, const Tensor& y) {
            dataset.gather(idx, n, x, y);
          },
          std::move(options)) {}

Loader::~Loader() { stop(); }

void Loader::start(int64_t first, int64_t end, PlanFn plan) {
  HPC_ASSERT(0 <= first && first <= end, "loader range");
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Slot& s : slots_) {
      s.state = SlotState::Free;
      s.error = nullptr;
    }
    plan_ = std::move(plan);
    stopping_ = failed_ = false;
    next_claim_ = cursor_ = first;
    end_ = end;
    held_ = -1;
  }
  const int64_t n = std::min<int64_t>(workers_, end - first);
  for (int64_t i = 0; i < n; ++i) {
    threads_.emplace_back([this] { work(); });
    pthread_setname_np(threads_.back().native_handle(), "hpc-loader");
  }
}

void Loader::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  held_ = -1;
}

bool Loader::can_claim() const {
  return !failed_ && next_claim_ < end_ &&
         slots_[static_cast<size_t>(next_claim_ % static_cast<int64_t>(slots_.size()))].state ==
             SlotState::Free;
}

void Loader::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || failed_ || next_claim_ >= end_ || can_claim(); });
    if (stopping_ || failed_ || next_claim_ >= end_) return;
    const int64_t item = next_claim_++;
    Slot& slot = slots_[static_cast<size_t>(item % static_cast<int64_t>(slots_.size()))];
    slot.state = SlotState::Filling;
    lock.unlock();
    std::exception_ptr error;
    int64_t valid = 0;
    try {
      const int64_t rows = layout_.x_shape[0];
      valid = plan_(item, slot.indices.data());
      HPC_ASSERT(0 <= valid && valid <= rows, "loader plan returned a bad valid count");
      gather_(item, slot.indices.data(), rows, slot.batch.x, slot.batch.y);
      if (transform_) transform_(item, slot.indices.data(), rows, slot.batch.x);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    slot.batch.item = item;
    slot.batch.valid = valid;
    slot.error = error;
    slot.state = error ? SlotState::Failed : SlotState::Ready;
    if (error) {
      failed_ = true;  // claims are in order: every earlier item is already being filled
      work_cv_.notify_all();
    }
    ready_cv_.notify_all();
  }
}

const Batch& Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (held_ >= 0) {
    slots_[static_cast<size_t>(held_)].state = SlotState::Free;
    held_ = -1;
    work_cv_.notify_one();
  }
  HPC_ASSERT(cursor_ < end_, "Loader::next past the end of the served range");
  HPC_ASSERT(!threads_.empty() || cursor_ < next_claim_, "Loader::next without start()");
  const int index = static_cast<int>(cursor_ % static_cast<int64_t>(slots_.size()));
  Slot& slot = slots_[static_cast<size_t>(index)];
  const auto t0 = std::chrono::steady_clock::now();
  ready_cv_.wait(
      lock, [&] { return stopping_ || slot.state == SlotState::Ready || slot.state == SlotState::Failed; });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  total_wait_s_ += waited;
  HPC_ASSERT(!stopping_, "Loader::next while stopping");
  HPC_ASSERT(slot.batch.item == cursor_, "loader slot holds the wrong item");
  if (slot.state == SlotState::Failed) {
    // Join the workers before the error travels on: whatever the caller does
    // next (even std::exit), no loader thread is left running.
    const std::exception_ptr error = slot.error;
    lock.unlock();
    stop();
    std::rethrow_exception(error);
  }
  slot.batch.wait_s = waited;
  held_ = index;
  ++cursor_;
  return slot.batch;
}

int64_t Loader::position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cursor_;
}

int64_t Loader::end() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return end_;
}

double Loader::total_wait_s() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_wait_s_;
}

}  // namespace hpc::data
