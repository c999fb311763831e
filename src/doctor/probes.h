// Local probes of the doctor: what this process can see of its node without
// talking to other ranks (InfiniBand adapters, network interfaces, the
// environment that configures NCCL/UCX/Open MPI, CPUs, GPUs the kernel knows
// about, the run directory). Each probe takes its root path or environment
// as a parameter so that tests can point it at a planted tree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "doctor/facts.h"

namespace hpc::doctor {

// Ports of every adapter under `root` (normally /sys/class/infiniband),
// sorted by device and port; empty when the directory does not exist.
std::vector<IbPort> scan_infiniband(const std::string& root = "/sys/class/infiniband");

// A sysfs numa_node file's value; -1 when absent or unreadable (also the kernel's "one node").
int read_numa_node(const std::filesystem::path& file);
// The NUMA node of the GPU at CUDA's PCI bus id ("00000000:17:00.0"), from `root` (normally
// /sys/bus/pci/devices).
int gpu_numa_node(const std::string& pci_bus_id, const std::string& root = "/sys/bus/pci/devices");
// dlopen(name) works in this process (a library the container may lack: libibverbs.so.1).
bool library_loads(const char* name);

// Names of this node's network interfaces (lo, eth0, ib0, …).
std::vector<std::string> network_interfaces();

// Entries of /proc/driver/nvidia/gpus under `root`: the GPUs the NVIDIA
// driver has on this node, whether or not this process may use them.
int nvidia_gpus_present(const std::string& root = "/proc/driver/nvidia/gpus");

// CPUs in this process's affinity mask.
int affinity_cpus();

// The variables of `environ` that configure communication and I/O (NCCL_*,
// UCX_*, OMPI_MCA_*, PMIX_MCA_*, FI_*, HDF5_USE_FILE_LOCKING,
// CUDA_VISIBLE_DEVICES, OMP/OpenBLAS threads), sorted by name. Variables that
// a launcher sets for its own bookkeeping (OMPI_MCA_orte_*, …: different on
// every rank, never set by users) are left out and counted in *hidden.
std::vector<std::pair<std::string, std::string>> fabric_environment(char** environ_, int* hidden);

// NCCL_SOCKET_IFNAME semantics: a comma-separated list of interface name
// prefixes ("=name" for an exact name); a leading '^' excludes instead.
// True when at least one of `interfaces` would be used.
bool socket_ifname_matches(const std::string& spec, const std::vector<std::string>& interfaces);

// NCCL_IB_HCA semantics ("mlx5_0:1,mlx5_1", '^' excludes, '=' exact): the
// devices the list asks for that `ports` does not have. Empty for '^' lists.
std::vector<std::string> missing_ib_hcas(const std::string& spec, const std::vector<IbPort>& ports);

// File system type of the one holding `path` ("lustre", "gpfs", "nfs",
// "ext4", "tmpfs", "overlay", …, or "0x…" when unknown; "" on error).
std::string filesystem_type(const std::string& path);

// Whether rank 0 can write its run directory: if `path` exists, a temporary
// file is created, written, fsynced and removed in it; if not, the same is
// done in its nearest existing ancestor (where the run directory would be
// created). Also the free space there. Leaves nothing behind.
RunDirFacts check_run_dir(const std::string& path);

// "1.5 GiB", "512 MiB", "0 B".
std::string human_bytes(uint64_t bytes);

}  // namespace hpc::doctor
