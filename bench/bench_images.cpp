// Benchmark: how many images per second the loader decodes and augments,
// through the same code a training run uses (ImageDataset in the Loader's
// worker threads, via data::make_train_loader), on a file written by
// `hpcdata pack --from image-folder --store jpeg`.
//
// Items of --batch samples in the sampler's shuffled order are served
// until --seconds have passed (after one warm-up item, which also brings
// the file into the page cache); the figure is images per second and per
// thread. bench/images.py runs it beside PyTorch's DataLoader with
// torchvision transforms and PIL on the same files and cores.
//
//   build/bench/bench_images FILE.h5 [--augment "random_resized_crop:224, flip"] [--workers N]
//                                    [--batch B] [--seconds S] [--val]
// Prints one JSON line: {"images_per_s": …, "per_thread": …, "workers": N, "images": …}.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/augment.h"
#include "data/image_dataset.h"
#include "data/sampler.h"
#include "data/train_loader.h"

using namespace hpc;
using namespace hpc::data;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: bench_images FILE.h5 [--augment TEXT] [--workers N] [--batch B] [--seconds S] [--val]\n");
    return 2;
  }
  std::string path = argv[1], augment_text = "random_resized_crop:224, flip";
  int workers = 1;
  int64_t batch = 64;
  double seconds = 10;
  bool val = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--augment" && more)
      augment_text = argv[++i];
    else if (a == "--workers" && more)
      workers = std::atoi(argv[++i]);
    else if (a == "--batch" && more)
      batch = std::atoll(argv[++i]);
    else if (a == "--seconds" && more)
      seconds = std::atof(argv[++i]);
    else if (a == "--val")
      val = true;
    else {
      std::fprintf(stderr, "bench_images: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const Augment augment = val ? Augment{} : parse_augment(augment_text);
    const ImageDataset ds(path, "train", augment.resized_crop, OpenOptions{});
    const DistributedSampler sampler(ds.info().size, batch, 1, 0, 42, true, PadMode::Wrap, "bench");
    const int64_t per_epoch = sampler.batches_per_epoch();
    std::unique_ptr<Loader> loader = make_train_loader(
        ds, batch, LoaderOptions{workers, 2 * workers, nullptr}, augment, 42,
        [per_epoch](int64_t item) { return item / per_epoch; }, "bench");
    loader->start(0, int64_t(1) << 40, [&](int64_t item, int64_t* out) {
      return sampler.indices(item / per_epoch, item % per_epoch, 0, batch, out);
    });
    loader->next();  // warm-up: threads started, the file in the page cache
    const auto t0 = Clock::now();
    int64_t images = 0;
    double elapsed = 0;
    while (elapsed < seconds) {
      loader->next();
      images += batch;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    loader->stop();
    std::printf(
        "{\"images_per_s\": %.1f, \"per_thread\": %.1f, \"workers\": %d, \"images\": %lld, \"view\": "
        "\"%s\"}\n",
        double(images) / elapsed, double(images) / elapsed / workers, workers, static_cast<long long>(images),
        val ? "validation" : augment.str().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_images: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
