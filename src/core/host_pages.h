// Host memory by the page: zeroed ranges handed back to the OS, and how much
// of a range is resident. ZeRO stage 2 keeps only its shard of the reduced
// gradients this way (train/sharding.h): the rest of the flat gradient buffer
// stays reserved (its addresses are the layers' gradient views) but takes
// memory only between backward writing a bucket and its reduce-scatter.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace hpc {

// Zeroes [p, p + bytes). The whole pages inside go back to the OS
// (madvise MADV_DONTNEED: they read as zero and take memory again only when
// written); the partial pages at either end are cleared with memset. p must
// be private anonymous host memory, which is what Tensor allocates.
void release_zeroed(void* p, size_t bytes);
// The same for elements [begin, end) of the host tensor t (nothing when end <= begin).
void release_zeroed(const Tensor& t, int64_t begin, int64_t end);

// The bytes of the pages overlapping [p, p + bytes) that are resident in RAM
// (mincore): whole pages, so up to a page more than the range at either end.
size_t resident_bytes(const void* p, size_t bytes);

// This process's resident memory now (VmRSS) and at most since the last reset_peak_rss (VmHWM;
// reset by writing 5 to /proc/self/clear_refs). 0 where /proc cannot tell. What a checkpoint save
// costs in host memory is measured with them.
size_t rss_bytes();
size_t peak_rss_bytes();
void reset_peak_rss();

}  // namespace hpc
