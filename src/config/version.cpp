// version_report(): hpctrain's version and the libraries it was built with.
//
// Printed by --version and at start-up by rank 0 (nccl-tests style), so that
// a log says exactly what ran. Everything here is safe before MPI_Init:
// MPI_Get_library_version is one of the few MPI calls the standard allows
// then, which lets --version work without a launcher.
#include <H5public.h>
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <boost/version.hpp>
#include <sstream>

#include "backend/cpu/blas_core.h"
#include "backend/cpu/isa/kernel_table.h"
#include "backend/cpu/onednn.h"
#include "backend/device.h"
#include "config/config.h"

// The Makefile defines both for this file alone; a compile outside it (an IDE's indexer) still builds.
#ifndef HPCTRAIN_VERSION
#define HPCTRAIN_VERSION "0.0.0"
#endif
#ifndef HPCTRAIN_COMMIT
#define HPCTRAIN_COMMIT "unknown"
#endif

namespace hpc {

const char* hpctrain_version() { return HPCTRAIN_VERSION; }
const char* hpctrain_commit() { return HPCTRAIN_COMMIT; }

namespace {

std::string first_line(const char* text) {
  std::string s = text ? text : "";
  s.resize(std::min(s.size(), s.find('\n')));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string mpi_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown";
  return first_line(buf);
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string boost_version() {
  std::string v = BOOST_LIB_VERSION;  // "1_74"
  for (char& c : v)
    if (c == '_') c = '.';
  return v;
}

}  // namespace

std::string version_report() {
  std::ostringstream os;
  os << "hpctrain " << hpctrain_version() << " (commit " << hpctrain_commit() << ")\n"
     << "  CUDA:     " << backend::cuda_versions() << "\n"
     << "  MPI:      " << mpi_version() << "\n"
     << "  HDF5:     " << hdf5_version() << "\n"
     << "  Boost:    " << boost_version() << "\n"
     << "  BLAS:     " << first_line(openblas_get_config()) << "\n"
     << "  BLAS core: " << backend::cpu::blas_core().line() << "\n"
     << "  CPU kernels: " << backend::cpu::kernel_table<float>().isa
     << " (float32 loops; HPCTRAIN_CPU_ISA=avx2 for avx2)\n"
     << "  oneDNN:   " << backend::cpu::onednn::describe() << "\n"
#if defined(__clang__)
     << "  compiler: clang " << __clang_version__ << "\n";
#elif defined(__GNUC__)
     << "  compiler: GCC " << __VERSION__ << "\n";
#else
     << "  compiler: " << __VERSION__ << "\n";
#endif
  return os.str();
}

}  // namespace hpc
