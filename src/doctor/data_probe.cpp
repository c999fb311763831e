// probe_data() (see data_probe.h).
//
// H5Dataset, ImageDataset and TokenDataset map contiguous datasets and read nothing else
// up front, so opening even a large file here costs what training's
// start-up costs: the validation scan of the first samples (for a token
// file, of its token ids against the vocabulary).
#include "doctor/data_probe.h"

#include <cstdlib>
#include <exception>

#include "core/error.h"
#include "core/tensor.h"
#include "data/h5_dataset.h"
#include "data/image_dataset.h"
#include "data/token_dataset.h"
#include "doctor/probes.h"

namespace hpc::doctor {

namespace {

SplitFacts split_facts(const data::TokenDataset& d) {
  SplitFacts s;
  s.name = d.split();
  s.tokens = true;
  s.samples = d.num_tokens();
  s.sample_shape = "token";
  s.dtype = data::token_type_name(d.token_type());
  s.num_classes = d.vocab();
  s.mapped = d.mapped();
  for (const std::string& why : d.unmapped()) s.why_not += (s.why_not.empty() ? "" : "; ") + why;
  return s;
}

// H5Dataset or ImageDataset (x/y samples, decoded or not).
template <typename D>
SplitFacts split_facts(const D& d) {
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
    const std::string val_file = val_path.empty() ? path : val_path;
    if (data::TokenDataset::is_token_file(path)) {
      // Windows of one token: every token is validated whatever model.context the run will use.
      f.splits.push_back(split_facts(data::TokenDataset(path, "train", 1)));
      if (data::TokenDataset::has_tokens(val_file, "val"))
        f.splits.push_back(split_facts(data::TokenDataset(val_file, "val", 1)));
    } else if (data::ImageDataset::is_image_file(path)) {
      f.splits.push_back(split_facts(data::ImageDataset(path, "train", 0, data::OpenOptions{})));
      if (data::ImageDataset::has_split(val_file, "val"))
        f.splits.push_back(split_facts(data::ImageDataset(val_file, "val", 0, data::OpenOptions{})));
    } else {
      f.splits.push_back(split_facts(data::H5Dataset(path, "train")));
      if (data::H5Dataset::has_split(val_file, "val"))
        f.splits.push_back(split_facts(data::H5Dataset(val_file, "val")));
    }
    f.opens = true;
  } catch (const Error& e) {
    f.error = e.what();
  } catch (const std::exception& e) {
    f.error = std::string("data file '") + path + "': " + e.what();
  }
  return f;
}

}  // namespace hpc::doctor
