// Fuzz target: hpcdata's IDX reader (data_tools/idx.cpp, pack_mnist.cpp)
// through `hpcdata pack --from mnist-idx DIR`.
//
// Feeds: byte 0 chooses the options (bit 0: --val-fraction 0.5 instead of
// the t10k files; bit 1: the t10k files are the train files too, else they
// are written empty); bytes 1-2 (little-endian) are the length of the
// image file; then the image file (train-images-idx3-ubyte), then the label
// file (train-labels-idx1-ubyte). Either may be gzipped.
// Checks: pack ends in success or a UserError, and a file it writes is one
// hpctrain accepts (pack_check.h).
#include <filesystem>

#include "pack_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::quiet_stdout();
  fuzz::ByteReader in(data, size);
  const uint8_t o = in.u8();
  const size_t image_len = in.u16();
  const std::string rest = in.rest();
  const std::string images = rest.substr(0, std::min(image_len, rest.size()));
  const std::string labels = rest.substr(images.size());
  const fuzz::ScratchDir& dir = fuzz::scratch();
  std::filesystem::create_directories(dir.path() + "/mnist");
  dir.write("mnist/train-images-idx3-ubyte", images);
  dir.write("mnist/train-labels-idx1-ubyte", labels);
  dir.write("mnist/t10k-images-idx3-ubyte", o & 2 ? images : "");
  dir.write("mnist/t10k-labels-idx1-ubyte", o & 2 ? labels : "");
  data_tools::PackOptions opt;
  opt.from = "mnist-idx";
  opt.inputs = {dir.path() + "/mnist"};
  if (o & 1) opt.val_fraction = 0.5;
  fuzz::pack_and_check("idx", opt);
  return 0;
}
