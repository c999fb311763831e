// Fuzz target: hpcdata's CIFAR-10 binary reader (data_tools/pack_cifar.cpp)
// through `hpcdata pack --from cifar10-bin`.
//
// Feeds: byte 0 chooses the options (bit 0: the rest is also given as --val;
// bit 1: --val-fraction 0.5); the rest is one batch file (3073-byte records,
// plain or gzipped).
// Checks: pack ends in success or a UserError, and a file it writes is one
// hpctrain accepts (pack_check.h).
#include "pack_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::quiet_stdout();
  fuzz::ByteReader in(data, size);
  const uint8_t o = in.u8();
  data_tools::PackOptions opt;
  opt.from = "cifar10-bin";
  opt.inputs = {fuzz::scratch().write("data_batch_1.bin", in.rest())};
  if (o & 1) opt.val_inputs = opt.inputs;
  if (o & 2) opt.val_fraction = 0.5;
  fuzz::pack_and_check("cifar", opt);
  return 0;
}
