// What one rank of `hpctrain doctor` found out about its own process, node
// and inputs, in a form that travels to rank 0.
//
// Every rank fills a RankFacts with local probes only (no communication);
// rank 0 gathers them all (Context::gather_lines) and decides from the whole
// picture what is wrong (analysis.h). One serialize() function walks the
// fields for both directions, writing and reading, so the wire format cannot
// drift from the struct: add a field to the struct and to serialize(), done.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpc::doctor {

// Library versions: compiled against (build) and loaded at run time.
// "" where a library is not part of this build.
struct LibVersions {
  std::string hpctrain;  // "0.1.0 (commit 1ad89bc)"
  bool cuda_built = false;
  std::string cuda_build, cuda_runtime, cuda_driver;  // driver "" when none is installed
  std::string cudnn_build, cudnn_runtime;
  std::string nccl_build, nccl_runtime;
  std::string mpi_build, mpi_runtime;  // runtime: first line of MPI_Get_library_version
  std::string hdf5_build, hdf5_runtime;
  std::string blas_core;     // backend::cpu::BlasCore::line(): the core in use and why
  bool blas_lesser = false;  // that core's vector class is below the CPU's
};

struct GpuFacts {
  int index = -1;  // CUDA device index as this process sees it
  std::string name;
  std::string pci_bus_id;
  uint64_t total_bytes = 0;
  int numa_node = -1;  // /sys/bus/pci/devices/<bus id>/numa_node; -1: unknown or one node
};

// One port of an InfiniBand (or RoCE) adapter, from /sys/class/infiniband.
struct IbPort {
  std::string device;  // mlx5_0
  int port = 1;
  std::string state;       // ACTIVE, DOWN, INIT, …
  std::string rate;        // "200 Gb/sec (4X HDR)"
  std::string link_layer;  // InfiniBand | Ethernet
  int numa_node = -1;      // DEVICE/device/numa_node; -1: unknown or one node
};

// One split of the data file (/train, /val) as H5Dataset validated it.
struct SplitFacts {
  std::string name;  // train | val
  int64_t samples = 0;
  std::string sample_shape;  // 1x28x28
  std::string dtype;         // float32 | uint8
  int64_t num_classes = 0;   // 0 for regression targets
  bool mapped = false;       // x and y memory-mapped (else read with H5Dread, slower)
  std::string why_not;       // the unmapped datasets and why, "; "-separated
  bool tokens = false;  // a token stream (/SPLIT/tokens): samples counts tokens, num_classes the vocabulary
};

// --data.path as seen from one node (checked by local rank 0 of each node).
struct DataFacts {
  bool checked = false;  // false on ranks that leave it to their node's local rank 0, or without --data.path
  std::string path;
  bool opens = false;
  std::string error;       // one line, when it does not open or does not validate
  std::string filesystem;  // lustre, gpfs, nfs, ext4, …
  std::vector<SplitFacts> splits;
  std::string locking_env;  // HDF5_USE_FILE_LOCKING as set, or "(unset)"
};

// The run directory as seen from rank 0 (the only writer of checkpoints and metrics).
struct RunDirFacts {
  bool checked = false;
  std::string path;
  std::string probed;  // the directory actually tested: run.dir, or its nearest existing ancestor
  bool exists = false;
  bool writable = false;
  std::string error;  // why not writable
  uint64_t free_bytes = 0;
  std::string filesystem;
};

struct RankFacts {
  int rank = 0, world = 1, local_rank = 0, local_size = 1, node = 0, num_nodes = 1;
  std::string host;
  int pid = 0;
  int cpus = 0;  // CPUs in this process's affinity mask

  // Devices: what CUDA sees, what the kernel driver says exists, and the pick.
  int gpus_visible = 0;              // cuda_device_count()
  int nvidia_gpus = 0;               // /proc/driver/nvidia/gpus entries (GPUs on the node, visible or not)
  std::string cuda_visible_devices;  // value, or "(unset)"
  std::string device;                // "cpu" or "cuda"
  std::string device_note;           // why cpu: "no GPU visible", "--train.device cpu", …
  GpuFacts gpu;

  LibVersions versions;
  std::vector<IbPort> ib;
  bool ibverbs = true;  // libibverbs.so.1 loads in this process (NCCL's and UCX's way to InfiniBand)
  std::vector<std::string> interfaces;                   // network interfaces (for NCCL_SOCKET_IFNAME)
  std::vector<std::pair<std::string, std::string>> env;  // NCCL_*, UCX_*, OMPI_MCA_*, … that apply
  int env_hidden = 0;                                    // launcher-internal variables left out of env
  std::string container;  // image path when running inside Apptainer/Singularity, else ""

  DataFacts data;
  RunDirFacts run_dir;
};

// Text form for Context::gather_lines, and back. decode throws
// std::runtime_error on malformed input (a bug: both ends run this code).
std::string encode(const RankFacts& f);
RankFacts decode(const std::string& text);

}  // namespace hpc::doctor
