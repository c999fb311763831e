// The doctor's check of the training data: does --data.path open and
// validate exactly as training would open it, can its datasets be
// memory-mapped, and what file system and HDF5 locking setting it meets.
#pragma once

#include <string>

#include "doctor/facts.h"

namespace hpc::doctor {

// Opens /train of `path` (and /val of `val_path`, or of `path` when it has
// one) with data::H5Dataset, the same validation training runs at start-up.
// Never throws: a problem is recorded in DataFacts::error.
DataFacts probe_data(const std::string& path, const std::string& val_path);

}  // namespace hpc::doctor
