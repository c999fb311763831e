// Loader: items come out in order with content that depends only on their
// indices (any number of workers, any timing); serving starts at any item;
// a worker that throws delivers every earlier item, then its exception, and
// nothing hangs or outlives the loader; the wait is measured; buffers come
// from the allocator hook and go back to it; over a real HDF5 file the
// loader returns what H5Dataset::gather returns.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/h5_dataset.h"
#include "data/h5_handle.h"
#include "data/loader.h"
#include "data/sampler.h"

using hpc::DType;
using hpc::Shape;
using hpc::Tensor;
using namespace hpc::data;

namespace {

constexpr int64_t ROWS = 4, FEATURES = 3;

// Runs fn on another thread; a deadlock fails the test (and ends the process) instead of hanging CTest.
void within_seconds(double seconds, const std::function<void()>& fn) {
  auto done = std::async(std::launch::async, fn);
  if (done.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: loader test did not finish within %.0f s (deadlock)\n", seconds);
    std::_Exit(1);
  }
  done.get();  // rethrows a failed expectation's exception, if any
}

// Item k's indices: 10k, 10k+1, …; the last item of a range is half padding.
int64_t plan(int64_t item, int64_t* out) {
  for (int64_t i = 0; i < ROWS; ++i) out[i] = 10 * item + i;
  return item % 5 == 4 ? ROWS / 2 : ROWS;
}

// x[i][j] = index·100 + j, y[i] = index; sleeps a pseudo-random while so that workers finish out of order.
GatherFn fake_gather(std::atomic<int>* calls = nullptr, int throw_at_index = -1) {
  return [=](int64_t, const int64_t* idx, int64_t n, const Tensor& x, const Tensor& y) {
    if (calls) ++*calls;
    hpc::Rng rng(static_cast<uint64_t>(idx[0]));
    std::this_thread::sleep_for(std::chrono::microseconds(rng.below(3000)));
    for (int64_t i = 0; i < n; ++i) {
      if (idx[i] == throw_at_index)
        throw hpc::UserError("data file 'f.h5': /train/x: reading samples failed (injected)");
      for (int64_t j = 0; j < FEATURES; ++j) x.data<float>()[i * FEATURES + j] = float(idx[i] * 100 + j);
      y.data<int32_t>()[i] = static_cast<int32_t>(idx[i]);
    }
  };
}

BatchLayout layout() { return {Shape{ROWS, FEATURES}, DType::F32, Shape{ROWS}, DType::I32}; }

void expect_item(const Batch& b, int64_t item) {
  ASSERT_EQ(b.item, item);
  EXPECT_EQ(b.valid, item % 5 == 4 ? ROWS / 2 : ROWS);
  for (int64_t i = 0; i < ROWS; ++i) {
    EXPECT_EQ(b.y.data<int32_t>()[i], 10 * item + i) << "item " << item;
    for (int64_t j = 0; j < FEATURES; ++j)
      EXPECT_EQ(b.x.data<float>()[i * FEATURES + j], float((10 * item + i) * 100 + j));
  }
}

}  // namespace

TEST(Loader, ItemsComeInOrderWithDeterministicContent) {
  within_seconds(60, [] {
    for (int workers : {1, 2, 4})
      for (int prefetch : {1, 3}) {
        Loader loader(layout(), fake_gather(), {workers, prefetch, nullptr});
        loader.start(0, 40, plan);
        for (int64_t k = 0; k < 40; ++k) expect_item(loader.next(), k);
        EXPECT_EQ(loader.position(), 40);
      }
  });
}

TEST(Loader, StartsAtAnyItemAndRestarts) {
  within_seconds(60, [] {
    Loader loader(layout(), fake_gather(), {3, 2, nullptr});
    loader.start(17, 25, plan);  // e.g. a resume in the middle of an epoch
    for (int64_t k = 17; k < 20; ++k) expect_item(loader.next(), k);
    loader.start(5, 9, plan);  // restarting drops what was prefetched
    for (int64_t k = 5; k < 9; ++k) expect_item(loader.next(), k);
    loader.start(9, 9, plan);  // an empty range starts no worker
    EXPECT_EQ(loader.position(), 9);
  });
}

namespace {
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// The thread count once it has fallen to `want`, or after 1 s. A joined thread's /proc/self/task
// entry can outlive the join by a moment (measured here: the joiner is woken while the task still
// runs its exit, in state R); a worker left running (not joined) would be blocked on the loader's
// queue and stay.
int thread_count_settled(int want) {
  int n = thread_count();
  for (int i = 0; i < 100 && n > want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = thread_count();
  }
  return n;
}
}  // namespace

TEST(Loader, WorkerExceptionArrivesInOrderAndNothingHangs) {
  within_seconds(60, [] {
    const int baseline = thread_count();
    for (int workers : {1, 2, 4}) {
      // Index 72 is in item 7 (indices 70..73): items 0..6 arrive, item 7 throws the worker's UserError.
      Loader loader(layout(), fake_gather(nullptr, 72), {workers, 3, nullptr});
      loader.start(0, 30, plan);
      for (int64_t k = 0; k < 7; ++k) expect_item(loader.next(), k);
      try {
        loader.next();
        ADD_FAILURE() << "no exception from the failed item";
      } catch (const hpc::UserError& e) {
        EXPECT_STREQ(e.what(), "data file 'f.h5': /train/x: reading samples failed (injected)");
        EXPECT_EQ(thread_count_settled(baseline), baseline) << "workers still running when the error arrived";
      }
    }
  });
}

TEST(Loader, PlanExceptionAndStopWithBlockedWorkersDoNotHang) {
  within_seconds(60, [] {
    Loader loader(layout(), fake_gather(), {2, 2, nullptr});
    loader.start(0, 10, [](int64_t item, int64_t* out) -> int64_t {
      if (item == 3) throw std::runtime_error("plan failed");
      return plan(item, out);
    });
    for (int64_t k = 0; k < 3; ++k) expect_item(loader.next(), k);
    EXPECT_THROW(loader.next(), std::runtime_error);

    // Workers blocked on a full ring (nobody consumes) are woken by stop().
    std::atomic<int> calls{0};
    Loader idle(layout(), fake_gather(&calls), {4, 2, nullptr});
    idle.start(0, 1000, plan);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(calls.load(), 3) << "the ring holds prefetch + 1 items";
    idle.stop();
    idle.stop();  // idempotent
  });
}

TEST(Loader, MeasuresTheWait) {
  within_seconds(60, [] {
    // Slow data, fast consumer: every item is waited for.
    GatherFn slow = [](int64_t, const int64_t*, int64_t, const Tensor&, const Tensor&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    };
    Loader starved(layout(), slow, {1, 2, nullptr});
    starved.start(0, 5, plan);
    double waits = 0;
    for (int k = 0; k < 5; ++k) waits += starved.next().wait_s;
    EXPECT_GE(waits, 5 * 0.015);  // ≥ 75% of the gather time: sleep_for never returns early
    EXPECT_NEAR(starved.total_wait_s(), waits, 1e-9);

    // Fast data, slow consumer: after the first item the prefetch hides it all.
    Loader fed(layout(), fake_gather(), {2, 4, nullptr});
    fed.start(0, 6, plan);
    fed.next();
    double later = 0;
    for (int k = 1; k < 6; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      later += fed.next().wait_s;
    }
    EXPECT_LT(later,
              0.020);  // the gathers take ≤ 3 ms each and ran during the 20 ms sleeps (slack: 2 shared cores)
  });
}

namespace {

class CountingAllocator : public HostAllocator {
 public:
  void* allocate(size_t bytes) override {
    ++allocs;
    void* p = std::malloc(bytes);
    std::memset(p, 0xAB, bytes);  // garbage: the loader must pre-touch (zero) it
    return p;
  }
  void deallocate(void* p, size_t) noexcept override {
    ++frees;
    std::free(p);
  }
  const char* name() const override { return "counting"; }
  std::atomic<int> allocs{0}, frees{0};
};

}  // namespace

TEST(Loader, BuffersComeFromTheAllocatorHookPreTouched) {
  auto alloc = std::make_shared<CountingAllocator>();
  {
    Loader loader(layout(), fake_gather(), {2, 3, alloc});
    EXPECT_EQ(alloc->allocs.load(), 2 * 4) << "x and y for each of prefetch + 1 slots";
    EXPECT_STREQ(loader.allocator_name(), "counting");
    loader.start(0, 1, [](int64_t, int64_t* out) -> int64_t {
      for (int64_t i = 0; i < ROWS; ++i) out[i] = 0;
      return ROWS;
    });
    const Batch& b = loader.next();
    EXPECT_EQ(b.y.data<int32_t>()[0], 0);
  }
  EXPECT_EQ(alloc->frees.load(), alloc->allocs.load());

  Loader check(layout(), [](int64_t, const int64_t*, int64_t, const Tensor&, const Tensor&) {},
               {1, 1, alloc});
  check.start(0, 1, plan);
  const Batch& b = check.next();  // gather wrote nothing: the buffers must read as zero, not 0xAB
  for (int64_t i = 0; i < ROWS * FEATURES; ++i) EXPECT_EQ(b.x.data<float>()[i], 0.0f);
}

TEST(Loader, OverAnHdf5FileMatchesGather) {
  namespace fs = std::filesystem;
  std::string dir_tmpl = (fs::temp_directory_path() / "hpctrain-test-loader.XXXXXX").string();
  const std::string dir = ::mkdtemp(dir_tmpl.data());
  const std::string path = dir + "/d.h5";
  const int64_t n = 103, per = 6;
  {
    std::vector<uint8_t> x(static_cast<size_t>(n * per));
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 7);
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
    H5Handle f = H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.id(), 1);
    hsize_t xd[2] = {hsize_t(n), hsize_t(per)}, yd[1] = {hsize_t(n)};
    H5Handle xs = H5Handle::space(H5Screate_simple(2, xd, nullptr)),
             ys = H5Handle::space(H5Screate_simple(1, yd, nullptr));
    H5Handle xds = H5Handle::dataset(
        H5Dcreate2(f.id(), "/train/x", H5T_STD_U8LE, xs.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
    H5Handle yds = H5Handle::dataset(
        H5Dcreate2(f.id(), "/train/y", H5T_STD_I32LE, ys.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
    H5Dwrite(xds.id(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data());
    H5Dwrite(yds.id(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data());
  }
  within_seconds(60, [&] {
    for (bool mmap : {true, false}) {
      H5Dataset ds(path, "train", OpenOptions{false, mmap});
      EXPECT_EQ(ds.mapped(), mmap);
      DistributedSampler sampler(n, 8, 1, 0, 11, true, PadMode::Mask);
      Loader loader(ds, 8, {3, 2, nullptr});
      loader.start(0, 2 * sampler.batches_per_epoch(), [&](int64_t item, int64_t* out) {
        return sampler.indices(item / sampler.batches_per_epoch(), item % sampler.batches_per_epoch(), out);
      });
      Tensor x(Shape{8, per}, DType::F32), y(Shape{8}, DType::I32);
      std::vector<int64_t> idx(8);
      for (int64_t k = 0; k < 2 * sampler.batches_per_epoch(); ++k) {
        const Batch& b = loader.next();
        const int64_t valid =
            sampler.indices(k / sampler.batches_per_epoch(), k % sampler.batches_per_epoch(), idx.data());
        ds.gather(idx.data(), 8, x, y);
        EXPECT_EQ(b.valid, valid);
        EXPECT_EQ(std::memcmp(b.x.raw(), x.raw(), x.num_bytes()), 0) << "item " << k;
        EXPECT_EQ(std::memcmp(b.y.raw(), y.raw(), y.num_bytes()), 0) << "item " << k;
      }
    }
  });
  fs::remove_all(dir);
}
