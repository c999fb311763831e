// probe_data() (see data_probe.h).
//
// H5Dataset maps contiguous datasets and reads nothing else up front, so
// opening even a large file here costs what training's start-up costs: the
// validation scan of the first samples.
#include "doctor/data_probe.h"

#include <cstdlib>
#include <exception>

#include "core/error.h"
#include "core/tensor.h"
#include "data/h5_dataset.h"
#include "doctor/probes.h"

namespace hpc::doctor {

namespace {

SplitFacts split_facts(const data::H5Dataset& d) {
  SplitFacts s;
  s.name = d.split();
  s.samples = d.info().size;
  s.sample_shape = d.info().sample_shape.str();
  s.dtype = dtype_name(d.info().x_dtype);
  s.num_classes = d.info().classification ? d.info().num_classes : 0;
  s.mapped = d.mapped();
  for (const std::string& why : d.unmapped()) s.why_not += (s.why_not.empty() ? "" : "; ") + why;
  return s;
}

}  // namespace

DataFacts probe_data(const std::string& path, const std::string& val_path) {
  DataFacts f;
  f.checked = true;
  f.path = path;
  const char* locking = std::getenv("HDF5_USE_FILE_LOCKING");
  f.locking_env = locking ? locking : "(unset)";
  f.filesystem = filesystem_type(path);
  try {
    data::H5Dataset train(path, "train");
    f.splits.push_back(split_facts(train));
    const std::string val_file = val_path.empty() ? path : val_path;
    if (data::H5Dataset::has_split(val_file, "val"))
      f.splits.push_back(split_facts(data::H5Dataset(val_file, "val")));
    f.opens = true;
  } catch (const Error& e) {
    f.error = e.what();
  } catch (const std::exception& e) {
    f.error = std::string("data file '") + path + "': " + e.what();
  }
  return f;
}

}  // namespace hpc::doctor
