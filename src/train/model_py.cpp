// The model.py that `hpctrain export --format torch` writes (see export.h):
// src/train/model.py, a real Python file (linted by `make lint`, imported by
// tests/e2e/model_py.sh), embedded at build time: the Makefile wraps it into
// $(BUILD)/gen/train/model_py.inc as a C++ raw string literal.
#include "train/export.h"

namespace hpc::train {

const char* torch_model_py() {
  return
#include "train/model_py.inc"
      ;
}

}  // namespace hpc::train
