// Fuzz target: hpcdata's .npy reader (data_tools/npy.cpp) through
// `hpcdata pack --from npy X.npy Y.npy`.
//
// Feeds: byte 0 chooses the options (bit 0: the same pair is also --val;
// bit 1: --val-fraction 0.5; bit 2: --classes 4; bit 3: --scale 0.5 --mean 0
// --std 2); bytes 1-2 (little-endian) are the length of X.npy; then X.npy,
// then Y.npy.
// Checks: pack ends in success or a UserError, and a file it writes is one
// hpctrain accepts (pack_check.h).
#include "pack_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::quiet_stdout();
  fuzz::ByteReader in(data, size);
  const uint8_t o = in.u8();
  const size_t x_len = in.u16();
  const std::string rest = in.rest();
  const std::string x = rest.substr(0, std::min(x_len, rest.size()));
  data_tools::PackOptions opt;
  opt.from = "npy";
  opt.inputs = {fuzz::scratch().write("x.npy", x), fuzz::scratch().write("y.npy", rest.substr(x.size()))};
  if (o & 1) opt.val_inputs = opt.inputs;
  if (o & 2) opt.val_fraction = 0.5;
  if (o & 4) opt.classes = 4;
  if (o & 8) opt.scale = 0.5, opt.mean = 0.0, opt.std = 2.0;
  fuzz::pack_and_check("npy", opt);
  return 0;
}
