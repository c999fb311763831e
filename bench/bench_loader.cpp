// Benchmark: the data loader against this machine's memcpy bandwidth.
//
// Writes MNIST-sized (1×28×28 uint8) and CIFAR-sized (3×32×32 uint8, and
// float32) datasets to a temporary directory, contiguous (as hpcdata writes
// them) and chunked + gzip (as h5py often does), then drives data::Loader
// over them the way the trainer does: shuffled indices from the
// DistributedSampler, batches of 256 converted to float32 in pre-touched
// buffers. Paths: mmap (the default for contiguous files), H5Dread on the
// same contiguous file (the fallback's own cost), and H5Dread of the
// chunked + gzip file (decompression through the chunk cache). Every pass
// after the first finds the file in the page cache, so this measures the
// loader, not the disk.
//
// The reference is memcpy measured in the same run with the same number of
// threads: "out GB/s" counts the float32 bytes the loader writes into batch
// buffers, the same bytes-moved figure memcpy reports, and "% memcpy" is
// their ratio. Target: mmap ≥ 50%.
//
//   build/bench/bench_loader [--quick] [--workers N] [--dir DIR]
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "data/h5_dataset.h"
#include "data/h5_handle.h"
#include "data/loader.h"
#include "data/sampler.h"

using namespace hpc;
using namespace hpc::data;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// memcpy GB/s with `threads` threads, each copying its own 256 MiB buffer (bytes copied per second).
double memcpy_gbs(int threads, double min_seconds) {
  const size_t bytes = size_t(256) << 20;
  std::vector<std::vector<char>> src(threads, std::vector<char>(bytes, 1)),
      dst(threads, std::vector<char>(bytes, 0));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    int passes = 0;
    while (seconds_since(t0) < min_seconds / 3) {
      std::vector<std::thread> pool;
      pool.reserve(static_cast<size_t>(threads));
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { std::memcpy(dst[t].data(), src[t].data(), bytes); });
      for (auto& th : pool) th.join();
      ++passes;
    }
    best = std::max(best, double(passes) * threads * bytes / seconds_since(t0) / 1e9);
  }
  return best;
}

struct Spec {
  const char* name;
  std::vector<hsize_t> sample;
  bool u8;
  int64_t n, quick_n;
};

// /train/x (uint8 or float32) and /train/y, contiguous 4 KiB-aligned, or chunked (64 samples) + gzip level 1.
void write_file(const std::string& path, const Spec& s, int64_t n, bool chunked) {
  H5Handle fapl = H5Handle::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_alignment(fapl.id(), 512, 4096);
  H5Handle f = H5Handle::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id()));
  H5Handle lcpl = H5Handle::plist(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  std::vector<hsize_t> dims{hsize_t(n)};
  dims.insert(dims.end(), s.sample.begin(), s.sample.end());
  H5Handle dcpl = H5Handle::plist(H5Pcreate(H5P_DATASET_CREATE));
  if (chunked) {
    std::vector<hsize_t> chunk(dims);
    chunk[0] = 64;
    H5Pset_chunk(dcpl.id(), int(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl.id(), 1);
  }
  int64_t per = 1;
  for (hsize_t d : s.sample) per *= int64_t(d);
  // Smooth-ish images (like real ones, so gzip has something to do) from a seeded RNG.
  Rng rng(1);
  std::vector<uint8_t> u8(static_cast<size_t>(n * per));
  for (size_t i = 0; i < u8.size(); ++i)
    u8[i] = static_cast<uint8_t>((i % 97 < 40 ? 0 : 128) + rng.below(64));
  std::vector<float> f32;
  if (!s.u8) f32.assign(u8.begin(), u8.end());
  H5Handle xs = H5Handle::space(H5Screate_simple(int(dims.size()), dims.data(), nullptr));
  H5Handle x = H5Handle::dataset(H5Dcreate2(f.id(), "/train/x", s.u8 ? H5T_STD_U8LE : H5T_IEEE_F32LE, xs.id(),
                                            lcpl.id(), dcpl.id(), H5P_DEFAULT));
  H5Dwrite(x.id(), s.u8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
           s.u8 ? static_cast<const void*>(u8.data()) : f32.data());
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = int32_t(i % 10);
  hsize_t ny = hsize_t(n);
  H5Handle ys = H5Handle::space(H5Screate_simple(1, &ny, nullptr));
  H5Handle yd = H5Handle::dataset(
      H5Dcreate2(f.id(), "/train/y", H5T_STD_I32LE, ys.id(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT));
  H5Dwrite(yd.id(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data());
}

struct Result {
  double samples_per_s = 0, in_gbs = 0, out_gbs = 0;
};

// Shuffled batches of `batch` through a Loader for at least min_seconds, after one warm-up epoch.
Result run_loader(const H5Dataset& ds, int workers, int64_t batch, double min_seconds) {
  DistributedSampler sampler(ds.info().size, batch, 1, 0, 7, true, PadMode::Drop);
  const int64_t per_epoch = sampler.batches_per_epoch();
  Loader loader(ds, batch, LoaderOptions{workers, 4, nullptr});
  auto plan = [&](int64_t item, int64_t* out) {
    return sampler.indices(item / per_epoch, item % per_epoch, out);
  };
  loader.start(0, per_epoch, plan);  // warm-up: page cache, chunk cache, first-touch
  for (int64_t k = 0; k < per_epoch; ++k) loader.next();
  loader.start(per_epoch, int64_t(1) << 40, plan);
  const auto t0 = Clock::now();
  int64_t batches = 0;
  while (seconds_since(t0) < min_seconds || batches < 4) {
    loader.next();
    ++batches;
  }
  const double s = seconds_since(t0);
  loader.stop();
  const double per = double(ds.info().sample_shape.count());
  Result r;
  r.samples_per_s = double(batches * batch) / s;
  r.in_gbs = r.samples_per_s * per * (ds.info().x_dtype == DType::U8 ? 1 : 4) / 1e9;
  r.out_gbs = r.samples_per_s * per * 4 / 1e9;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int workers = 2;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--workers" && i + 1 < argc)
      workers = std::max(1, std::atoi(argv[++i]));
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_loader [--quick] [--workers N] [--dir DIR]\n");
      return 2;
    }
  }
  namespace fs = std::filesystem;
  const bool own_dir = dir.empty();
  if (own_dir) {
    std::string tmpl = (fs::temp_directory_path() / "bench-loader.XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
  }
  const double min_s = quick ? 0.5 : 2.0;
  const int64_t batch = 256;

  std::printf("# bench_loader: %d worker thread(s), batch %lld, prefetch 4, shuffled, warm page cache\n",
              workers, static_cast<long long>(batch));
  std::printf("# %u hardware threads on this machine\n", std::thread::hardware_concurrency());
  const double mc1 = memcpy_gbs(1, min_s), mcw = workers > 1 ? memcpy_gbs(workers, min_s) : mc1;
  std::printf("# memcpy: %.2f GB/s with 1 thread, %.2f GB/s with %d threads\n", mc1, mcw, workers);
  std::printf("#\n# %-7s %-12s %-15s %7s %12s %9s %9s %9s\n", "data", "sample", "path", "workers",
              "samples/s", "in GB/s", "out GB/s", "% memcpy");

  const std::vector<Spec> specs = {{"mnist", {1, 28, 28}, true, 60000, 20000},
                                   {"cifar", {3, 32, 32}, true, 50000, 10000},
                                   {"cifar", {3, 32, 32}, false, 20000, 5000}};
  for (const Spec& s : specs) {
    const int64_t n = quick ? s.quick_n : s.n;
    const std::string tag = std::string(s.name) + (s.u8 ? "_u8" : "_f32");
    const std::string contiguous = dir + "/" + tag + ".h5", chunked = dir + "/" + tag + "_gz.h5";
    write_file(contiguous, s, n, false);
    write_file(chunked, s, n, true);
    std::string sample;
    for (hsize_t d : s.sample) sample += (sample.empty() ? "" : "x") + std::to_string(d);
    sample += s.u8 ? " u8" : " f32";
    struct Path {
      const char* name;
      std::string file;
      bool mmap;
    };
    for (const Path& p : {Path{"mmap", contiguous, true}, Path{"H5Dread", contiguous, false},
                          Path{"H5Dread+gzip", chunked, true}}) {
      const H5Dataset ds(p.file, "train", OpenOptions{false, p.mmap});
      for (int w : {1, workers}) {
        const Result r = run_loader(ds, w, batch, min_s);
        const double ref = w == 1 ? mc1 : mcw;
        std::printf("  %-7s %-12s %-15s %7d %12.0f %9.3f %9.3f %8.1f%%\n", s.name, sample.c_str(), p.name, w,
                    r.samples_per_s, r.in_gbs, r.out_gbs, 100 * r.out_gbs / ref);
        std::fflush(stdout);
        if (workers == 1) break;
      }
    }
  }
  if (own_dir) fs::remove_all(dir);
  return 0;
}
