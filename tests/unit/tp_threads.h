// A tensor-parallel group played by threads of one test (nn::TpComm): the
// ranks' host tensors meet in shared slots, and every reduction folds them
// in rank order (what MpiComm does), so a split layer or loss runs as on T
// ranks, and its results can be compared with the unsplit one's.
#pragma once

#include <barrier>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "nn/tensor_parallel.h"

namespace hpc::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), sync_(size), slots_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  // Runs body(rank) on `size` threads, one per rank, and waits for all. An exception in a body
  // (one every rank throws alike, before the group's collectives: a model refused) is rethrown here.
  void run(const std::function<void(int rank)>& body) {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(size_));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      threads.emplace_back([&body, &errors, r] {
        try {
          body(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // Every rank's values as doubles (float32 or float64 tensors), reduced into each rank's tensor.
  void reduce(int rank, const Tensor& t, bool max) {
    publish(rank, t);
    for (int64_t i = 0; i < t.count(); ++i) {
      double acc = slot(0, i);
      for (int r = 1; r < size_; ++r) acc = max ? (acc < slot(r, i) ? slot(r, i) : acc) : acc + slot(r, i);
      set(t, i, acc);
    }
    sync_.arrive_and_wait();
  }
  void gather(int rank, const Tensor& part, const Tensor& full) {
    publish(rank, part);
    for (int r = 0; r < size_; ++r)
      for (int64_t i = 0; i < part.count(); ++i) set(full, r * part.count() + i, slot(r, i));
    sync_.arrive_and_wait();
  }
  void sum_scatter(int rank, const Tensor& full, const Tensor& part) {
    publish(rank, full);
    const int64_t n = part.count();
    for (int64_t i = 0; i < n; ++i) {
      double acc = slot(0, rank * n + i);
      for (int r = 1; r < size_; ++r) acc += slot(r, rank * n + i);
      set(part, i, acc);
    }
    sync_.arrive_and_wait();
  }

 private:
  void publish(int rank, const Tensor& t) {
    std::vector<double>& s = slots_[static_cast<size_t>(rank)];
    s.resize(static_cast<size_t>(t.count()));
    for (int64_t i = 0; i < t.count(); ++i)
      s[static_cast<size_t>(i)] = t.dtype() == DType::F64 ? t.data<double>()[i] : double(t.data<float>()[i]);
    sync_.arrive_and_wait();
  }
  double slot(int r, int64_t i) const { return slots_[static_cast<size_t>(r)][static_cast<size_t>(i)]; }
  static void set(const Tensor& t, int64_t i, double v) {
    if (t.dtype() == DType::F64)
      t.data<double>()[i] = v;
    else
      t.data<float>()[i] = static_cast<float>(v);
  }

  int size_;
  std::barrier<> sync_;
  std::vector<std::vector<double>> slots_;
};

// One rank's view of a ThreadGroup.
class ThreadTp final : public nn::TpComm {
 public:
  ThreadTp(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int size() const override { return g_.size(); }
  int rank() const override { return rank_; }
  void sum(const Tensor& t) override { g_.reduce(rank_, t, false); }
  void max(const Tensor& t) override { g_.reduce(rank_, t, true); }
  void gather(const Tensor& part, const Tensor& full) override { g_.gather(rank_, part, full); }
  void sum_scatter(const Tensor& full, const Tensor& part) override { g_.sum_scatter(rank_, full, part); }

 private:
  ThreadGroup& g_;
  int rank_;
};

}  // namespace hpc::test
