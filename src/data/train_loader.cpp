// The training loader and its capacity measurement (see train_loader.h).
#include "data/train_loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "data/image_dataset.h"

namespace hpc::data {

namespace {

constexpr double MEASURE_SECONDS = 0.25;
constexpr int64_t MEASURE_MIN = 4, MEASURE_MAX = 256;

BatchLayout image_layout(const Dataset& ds, int64_t rows) {
  BatchLayout l;
  l.x_shape = ds.info().sample_shape.with_batch(rows);
  l.x_dtype = DType::F32;
  l.y_shape = Shape{rows};
  l.y_dtype = DType::I32;
  return l;
}

}  // namespace

std::unique_ptr<Loader> make_train_loader(const Dataset& ds, int64_t rows, LoaderOptions options,
                                          const Augment& augment, uint64_t seed,
                                          const std::function<int64_t(int64_t)>& epoch_of,
                                          const std::string& what) {
  if (const auto* images = dynamic_cast<const ImageDataset*>(&ds)) {
    if (augment.crop > 0)
      throw UserError("option --data.augment " + augment.str() +
                      ": crop:P pads and crops decoded images of one "
                      "size; " +
                      what + " holds encoded images: use random_resized_crop:SIZE");
    if (!augment.any()) return std::make_unique<Loader>(ds, rows, std::move(options));
    return std::make_unique<Loader>(
        image_layout(ds, rows),
        [images, augment, seed, epoch_of](int64_t item, const int64_t* idx, int64_t n, const Tensor& x,
                                          const Tensor& y) {
          images->gather_augmented(idx, n, x, y, augment, seed, epoch_of(item));
        },
        std::move(options));
  }
  auto loader = std::make_unique<Loader>(ds, rows, std::move(options));
  if (!augment.any()) return loader;
  const SplitInfo& info = ds.info();
  check_augment(augment, info.sample_shape, what);
  // The padding is what a raw 0 becomes (uint8 data are normalised while gathered).
  const float pad = info.x_dtype == DType::U8 ? static_cast<float>(-info.mean / info.std) : 0.0f;
  loader->set_transform(
      [augment, pad, seed, epoch_of](int64_t item, const int64_t* idx, int64_t n, const Tensor& x) {
        augment_batch(augment, x, idx, n, seed, epoch_of(item), pad);
      });
  return loader;
}

LoaderCapacity measure_loader(const Dataset& ds, const Augment& augment, uint64_t seed) {
  const auto* images = dynamic_cast<const ImageDataset*>(&ds);
  if (!images) return {};
  Tensor x(ds.info().sample_shape.with_batch(1), DType::F32), y(Shape{1}, DType::I32);
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  int64_t done = 0;
  const int64_t cap = std::min(MEASURE_MAX, ds.info().size * 4);
  while (done < cap && (done < MEASURE_MIN || elapsed < MEASURE_SECONDS)) {
    const int64_t index = done % ds.info().size;
    images->gather_augmented(&index, 1, x, y, augment, seed, done / ds.info().size);
    ++done;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return {elapsed > 0 ? double(done) / elapsed : 0.0, done};
}

std::string loader_capacity_line(const LoaderCapacity& c, int workers, int64_t batch_per_step) {
  if (c.measured == 0 || c.per_thread <= 0) return "";
  const double per_rank = c.per_thread * workers;
  char line[400];
  std::snprintf(
      line, sizeof line,
      "loader: decodes %.0f images/s per thread (measured on %lld): %d thread(s) deliver ~%.0f/s per "
      "rank, a step's %lld in %.1f ms; steps faster than that wait for data (data_ms): raise "
      "--data.workers (a core each)",
      c.per_thread, static_cast<long long>(c.measured), workers, per_rank,
      static_cast<long long>(batch_per_step), 1e3 * double(batch_per_step) / per_rank);
  return line;
}

}  // namespace hpc::data
