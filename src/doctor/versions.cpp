// library_versions() (see versions.h).
//
// Build versions come from the headers' macros, run-time versions from the
// libraries' own queries. The CUDA part exists only in a CUDA build
// (HPCTRAIN_CUDA, set by the Makefile together with the CUDA include path);
// it asks version queries only, which need no GPU: cudaDriverGetVersion
// reports 0 where no driver is installed.
#include "doctor/versions.h"

#include <H5public.h>
#include <mpi.h>

#include <algorithm>
#include <cctype>

#include "backend/cpu/blas_core.h"
#include "config/config.h"

#if HPCTRAIN_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#endif

namespace hpc::doctor {

namespace {

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string first_line(std::string s) {
  s.resize(std::min(s.size(), s.find('\n')));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string mpi_build_version() {
#if defined(OMPI_MAJOR_VERSION)
  return "Open MPI " + dotted(OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
  return std::string("MPICH ") + MPICH_VERSION;
#else
  return "MPI " + std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION);
#endif
}

std::string mpi_runtime_version() {
  // Allowed before MPI_Init and after MPI_Finalize (MPI 3.0).
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown";
  return first_line(buf);
}

#if HPCTRAIN_CUDA
// CUDA encodes 13.0 as 13000; cuDNN 9 as major·10000 + minor·100 + patch; NCCL 2.19+ likewise.
std::string cuda_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
std::string code_text(size_t v) {
  return dotted(static_cast<int>(v / 10000), static_cast<int>((v % 10000) / 100), static_cast<int>(v % 100));
}

void cuda_versions(LibVersions& v) {
  v.cuda_built = true;
  v.cuda_build = cuda_text(CUDART_VERSION);
  v.cudnn_build = dotted(CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  v.nccl_build = dotted(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) v.cuda_runtime = cuda_text(rt);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) v.cuda_driver = cuda_text(drv);
  cudaGetLastError();  // leave no sticky error for the code that runs next
  v.cudnn_runtime = code_text(cudnnGetVersion());
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) v.nccl_runtime = code_text(static_cast<size_t>(nccl));
}
#else
void cuda_versions(LibVersions& v) { v.cuda_built = false; }
#endif

}  // namespace

LibVersions library_versions() {
  LibVersions v;
  v.hpctrain = std::string(hpctrain_version()) + " (commit " + hpctrain_commit() + ")";
  cuda_versions(v);
  v.mpi_build = mpi_build_version();
  v.mpi_runtime = mpi_runtime_version();
  v.hdf5_build = dotted(H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE);
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) >= 0)
    v.hdf5_runtime = dotted(static_cast<int>(major), static_cast<int>(minor), static_cast<int>(release));
  const backend::cpu::BlasCore& blas = backend::cpu::blas_core();
  v.blas_core = blas.line();
  v.blas_lesser = blas.core_speed != backend::cpu::SpeedClass::Unknown && blas.core_speed < blas.cpu_speed;
  return v;
}

int major_minor(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])) ||
        (i > 0 && std::isdigit(static_cast<unsigned char>(text[i - 1]))))
      continue;
    size_t dot = i;
    while (dot < text.size() && std::isdigit(static_cast<unsigned char>(text[dot]))) ++dot;
    if (dot + 1 < text.size() && text[dot] == '.' && std::isdigit(static_cast<unsigned char>(text[dot + 1])))
      return std::stoi(text.substr(i, dot - i)) * 1000 + std::stoi(text.substr(dot + 1));
  }
  return -1;
}

}  // namespace hpc::doctor
