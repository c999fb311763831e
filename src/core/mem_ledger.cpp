// The allocation ledger by use (see mem_ledger.h).
#include "core/mem_ledger.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace hpc {

namespace {

thread_local MemUse current_use = MemUse::Other;

struct Counter {
  std::atomic<size_t> in_use{0}, peak{0};
};
// Never destroyed: buffers may be freed by other static objects' destructors at exit.
Counter* counters() {
  static auto* c = new Counter[NUM_MEM_USES];
  return c;
}

struct Allocations {
  std::mutex mu;
  std::unordered_map<const void*, std::pair<MemUse, size_t>> of;
};
Allocations& allocations() {
  static auto* a = new Allocations;
  return *a;
}

}  // namespace

const char* mem_use_name(MemUse use) {
  switch (use) {
    case MemUse::Other:
      return "other";
    case MemUse::Params:
      return "parameters";
    case MemUse::Grads:
      return "gradients";
    case MemUse::OptimizerState:
      return "optimizer state";
    case MemUse::GatherBuffers:
      return "gather buffers";
    case MemUse::GradStaging:
      return "gradient staging";
  }
  return "?";
}

MemUseStats mem_use_stats(MemUse use) {
  const Counter& c = counters()[static_cast<int>(use)];
  return {c.in_use.load(std::memory_order_relaxed), c.peak.load(std::memory_order_relaxed)};
}

void reset_mem_use_peaks() {
  for (int i = 0; i < NUM_MEM_USES; ++i)
    counters()[i].peak.store(counters()[i].in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

MemUseScope::MemUseScope(MemUse use) : previous_(current_use) { current_use = use; }
MemUseScope::~MemUseScope() { current_use = previous_; }

void mem_use_add(const void* p, size_t bytes) {
  const MemUse use = current_use;
  {
    Allocations& a = allocations();
    const std::lock_guard<std::mutex> lock(a.mu);
    a.of[p] = {use, bytes};
  }
  Counter& c = counters()[static_cast<int>(use)];
  const size_t now = c.in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void mem_use_remove(const void* p) {
  std::pair<MemUse, size_t> entry;
  {
    Allocations& a = allocations();
    const std::lock_guard<std::mutex> lock(a.mu);
    auto it = a.of.find(p);
    if (it == a.of.end()) return;
    entry = it->second;
    a.of.erase(it);
  }
  counters()[static_cast<int>(entry.first)].in_use.fetch_sub(entry.second, std::memory_order_relaxed);
}

}  // namespace hpc
