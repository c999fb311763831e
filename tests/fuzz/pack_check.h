// Runs `hpcdata pack` on fuzz-made input files and checks its promise.
//
// Used by the IDX, CIFAR-10, npy and CSV targets. pack() is the whole
// command: option checks, the format reader, the shared write pipeline
// (pack.cpp) and the atomic HDF5 writer, into a file on tmpfs. The promise
// checked when it succeeds: hpctrain accepts what hpcdata wrote, i.e. every
// split opens in H5Dataset with the full NaN/Inf scan, and a gather of its
// samples yields finite values.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "data/h5_dataset.h"
#include "data_tools/commands.h"
#include "fuzz_util.h"

namespace hpc::fuzz {

inline void check_packed_file(const char* target, const std::string& path) {
  for (const char* split : {"train", "val"}) {
    if (!data::H5Dataset::has_split(path, split)) continue;
    try {
      data::H5Dataset ds(path, split, true);
      const data::SplitInfo& info = ds.info();
      const int64_t n = std::min<int64_t>(info.size, 4);
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
      Tensor x(info.sample_shape.with_batch(n), DType::F32);
      Tensor y(info.classification ? Shape{n} : info.target_shape.with_batch(n),
               info.classification ? DType::I32 : DType::F32);
      ds.gather(idx.data(), n, x, y);
      for (int64_t i = 0; i < x.count(); ++i)
        require(std::isfinite(x.data<float>()[i]), target,
                "pack wrote " + std::string(split) + " x that gathers to a non-finite value");
    } catch (const UserError& e) {
      finding(target, std::string("hpctrain refuses what hpcdata pack wrote: ") + e.what());
    }
  }
}

// pack() with `opt` (output and --force filled in), then the check above.
inline void pack_and_check(const char* target, data_tools::PackOptions opt) {
  opt.out = scratch().path() + "/out.h5";
  opt.force = true;
  expect_clean(target, [&] {
    data_tools::pack(opt);
    check_packed_file(target, opt.out);
  });
}

}  // namespace hpc::fuzz
