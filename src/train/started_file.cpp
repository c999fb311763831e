// HPCTRAIN_STARTED_FILE (see started_file.h).
#include "train/started_file.h"

#include <cstdio>
#include <cstdlib>

namespace hpc::train {

void note_training_started(const dist::Context& ctx) {
  const char* path = std::getenv("HPCTRAIN_STARTED_FILE");
  if (path == nullptr || *path == '\0' || ctx.info().local_rank != 0) return;
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fprintf(f, "training started on %d rank(s); this line from rank %d on %s\n", ctx.world(), ctx.rank(),
                 ctx.info().host.c_str());
    std::fclose(f);
  }
}

}  // namespace hpc::train
