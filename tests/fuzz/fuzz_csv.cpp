// Fuzz target: hpcdata's CSV reader (data_tools/pack_csv.cpp) through `hpcdata pack --from csv`.
//
// Feeds: byte 0 chooses the options (bits 0-1: --targets 0..3; bits 2-3:
// delimiter , ; TAB or space; bits 4-5: --label-col none, "0", "label" or
// "2"; bit 6: --val-fraction 0.25; bit 7: --classes 3); the rest is the file
// (plain text, or gzip: the reader gunzips what starts with the gzip magic).
// Checks: pack ends in success or a UserError, and a file it writes is one
// hpctrain accepts (pack_check.h).
#include "pack_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hpc;
  fuzz::quiet_stdout();
  fuzz::ByteReader in(data, size);
  const uint8_t o = in.u8();
  data_tools::PackOptions opt;
  opt.from = "csv";
  opt.targets = o & 3;
  opt.delimiter = ",;\t "[(o >> 2) & 3];
  static const char* const LABEL_COLS[] = {"", "0", "label", "2"};
  opt.label_col = LABEL_COLS[(o >> 4) & 3];
  if (o & 64) opt.val_fraction = 0.25;
  if (o & 128) opt.classes = 3;
  opt.inputs = {fuzz::scratch().write("table.csv", in.rest())};
  fuzz::pack_and_check("csv", opt);
  return 0;
}
