// The training split's Loader, with data.augment wired to what the split
// holds, and the start-up measurement of what the loader can deliver.
//
// Decoded data (H5Dataset: uint8 or float x) is gathered, then flip and
// crop change the float batch (augment_batch). Encoded images
// (ImageDataset) are decoded with the augmentation, which needs the
// item's epoch: the gather itself takes it. Either way a batch is a
// function of the item's indices, the seed and the epoch only.
//
// The measurement decodes a few training samples on the calling thread
// (about a quarter of a second, bounded by a sample count) with the real
// pipeline, before training starts: images/s per loader thread, and so
// per rank with data.workers threads. Against a step's batch it tells a
// user at once whether decoding can keep up and how many threads it needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "data/augment.h"
#include "data/dataset.h"
#include "data/loader.h"

namespace hpc::data {

// Micro-batches of `rows` samples of `ds` with `augment` (already parsed);
// epoch_of(item) gives the epoch of a loader item. UserError (naming
// `what`) when the augmentation does not fit the data.
std::unique_ptr<Loader> make_train_loader(const Dataset& ds, int64_t rows, LoaderOptions options,
                                          const Augment& augment, uint64_t seed,
                                          const std::function<int64_t(int64_t)>& epoch_of,
                                          const std::string& what);

// What the loader can deliver, measured: samples/s on one thread.
struct LoaderCapacity {
  double per_thread = 0;  // samples/s
  int64_t measured = 0;   // samples decoded for the measurement
};

// Measures the training pipeline of `ds` (images only: 0 samples for data
// that is not decoded). Costs at most ~0.25 s.
LoaderCapacity measure_loader(const Dataset& ds, const Augment& augment, uint64_t seed);

// The start-up line: "loader: decodes … images/s per thread (…); with N
// threads ~… per rank, a step of B per rank is fed in … s …".
std::string loader_capacity_line(const LoaderCapacity& c, int workers, int64_t batch_per_step);

}  // namespace hpc::data
