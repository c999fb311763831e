// Library versions for the doctor: what hpctrain was compiled against and
// what this process actually loaded. The two differ when a cluster module or
// a container bind puts another libmpi / libnccl / libcudart on the library
// path, which is exactly what the doctor must show.
#pragma once

#include "doctor/facts.h"

namespace hpc::doctor {

// This process's versions. Safe before MPI_Init and after MPI_Finalize, and
// on machines without a GPU or driver.
LibVersions library_versions();

// Leading "major.minor" of a version text as major·1000 + minor ("Open MPI
// v4.1.4, package…" → 4001, "13.0" → 13000); -1 when there is none.
int major_minor(const std::string& text);

}  // namespace hpc::doctor
