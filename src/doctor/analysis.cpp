// The doctor's rules (see analysis.h), one function per area, in the order
// the report shows them: launch, versions, devices, network, data, run
// directory, preflight. Where many ranks share a cause (every rank on a
// node, every node) the finding is written once, naming them all.
#include "doctor/analysis.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "doctor/probes.h"
#include "doctor/versions.h"

namespace hpc::doctor {

namespace {

class Findings {
 public:
  void problem(std::string text) { list_.push_back({Severity::Problem, std::move(text)}); }
  void warning(std::string text) { list_.push_back({Severity::Warning, std::move(text)}); }
  std::vector<Finding> take() { return std::move(list_); }

 private:
  std::vector<Finding> list_;
};

std::string env_of(const RankFacts& f, const std::string& name) {
  for (const auto& [k, v] : f.env)
    if (k == name) return v;
  return "";
}

bool has_env(const RankFacts& f, const std::string& name) {
  return std::any_of(f.env.begin(), f.env.end(), [&](const auto& kv) { return kv.first == name; });
}

// Ranks grouped by host, hosts in order of their first rank.
std::vector<std::pair<std::string, std::vector<const RankFacts*>>> by_host(
    const std::vector<RankFacts>& ranks) {
  std::vector<std::pair<std::string, std::vector<const RankFacts*>>> out;
  for (const RankFacts& f : ranks) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& h) { return h.first == f.host; });
    if (it == out.end()) it = out.insert(out.end(), {f.host, {}});
    it->second.push_back(&f);
  }
  return out;
}

std::string ranks_of(const std::vector<const RankFacts*>& group) {
  std::vector<int> r;
  r.reserve(group.size());
  for (const RankFacts* f : group) r.push_back(f->rank);
  return (r.size() == 1 ? "rank " : "ranks ") + rank_list(r);
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s.empty() ? "none" : s;
}

void check_launch(const LaunchFacts& launch, const std::vector<RankFacts>& ranks, Findings& out) {
  if (!launch.pmi_problem.empty()) out.problem(launch.pmi_problem);
  if (launch.slurm_step_tasks > 1 && launch.world > 1 && launch.slurm_step_tasks != launch.world)
    out.problem("srun started " + std::to_string(launch.slurm_step_tasks) + " tasks but MPI has a world of " +
                std::to_string(launch.world) +
                ": start exactly one hpctrain per task (srun --mpi=pmix hpctrain …, "
                "not srun mpirun …)");
  // MPI groups ranks by shared memory; NCCL groups them by host name. Two
  // nodes with one name (a container started with --hostname) confuse NCCL.
  std::map<std::string, std::set<int>> nodes_of_host;
  for (const RankFacts& f : ranks) nodes_of_host[f.host].insert(f.node);
  for (const auto& [host, nodes] : nodes_of_host)
    if (nodes.size() > 1)
      out.problem(std::to_string(nodes.size()) + " different nodes all report the host name '" + host +
                  "': NCCL would take them for one node; do not set the container's host name (singularity "
                  "--hostname) or give each node its own");
}

void check_versions(const std::vector<RankFacts>& ranks, Findings& out) {
  std::map<std::string, std::vector<int>> mpi;
  for (const RankFacts& f : ranks) mpi[f.versions.mpi_runtime].push_back(f.rank);
  if (mpi.size() > 1) {
    std::string list;
    for (const auto& [v, r] : mpi)
      list += (list.empty() ? "" : "; ") + std::string("ranks ") + rank_list(r) + ": " + v;
    out.problem("ranks load different MPI libraries (" + list +
                "): use one MPI everywhere (the same module or container on every node)");
  }
  for (const auto& [host, group] : by_host(ranks)) {
    const LibVersions& v = group.front()->versions;
    const bool ompi_both = v.mpi_build.find("Open MPI") != std::string::npos &&
                           v.mpi_runtime.find("Open MPI") != std::string::npos;
    if (ompi_both && major_minor(v.mpi_build) / 1000 != major_minor(v.mpi_runtime) / 1000)
      out.problem("hpctrain was built with " + v.mpi_build + " but loads " + v.mpi_runtime + " on " + host +
                  ": the ABI differs between major versions; run with the MPI it was built with (container: "
                  "the hybrid model, see docs/cluster.md)");
    if (!v.cuda_driver.empty() && !v.cuda_runtime.empty() &&
        major_minor(v.cuda_driver) / 1000 < major_minor(v.cuda_runtime) / 1000)
      out.problem("the CUDA driver on " + host + " supports CUDA " + v.cuda_driver +
                  ", older than the CUDA " + v.cuda_runtime +
                  " runtime hpctrain uses: update the driver, or use an image built for CUDA " +
                  v.cuda_driver);
    if (!v.cudnn_build.empty() && major_minor(v.cudnn_build) / 1000 != major_minor(v.cudnn_runtime) / 1000)
      out.problem("hpctrain was built with cuDNN " + v.cudnn_build + " but loads cuDNN " + v.cudnn_runtime +
                  " on " + host + ": check LD_LIBRARY_PATH and the modules loaded");
    if (!v.nccl_build.empty() && major_minor(v.nccl_runtime) < major_minor(v.nccl_build))
      out.warning("NCCL " + v.nccl_runtime + " is loaded on " + host + " but hpctrain was built with NCCL " +
                  v.nccl_build + ": an older NCCL may lack what hpctrain uses; check LD_LIBRARY_PATH");
    if (major_minor(v.hdf5_build) != major_minor(v.hdf5_runtime))
      out.warning("hpctrain was built with HDF5 " + v.hdf5_build + " but loads HDF5 " + v.hdf5_runtime +
                  " on " + host + ": check LD_LIBRARY_PATH and the modules loaded");
    if (v.blas_lesser)
      out.warning("the BLAS kernels on " + host + " are slower than the CPU allows (" + v.blas_core +
                  "): unset OPENBLAS_CORETYPE to let hpctrain pick the core");
  }
}

void check_devices(const Config& cfg, const std::vector<RankFacts>& ranks, Findings& out) {
  // Two ranks on one GPU: found by PCI bus id, which is the same whichever
  // CUDA_VISIBLE_DEVICES index each rank knows the GPU by.
  std::map<std::pair<std::string, std::string>, std::vector<const RankFacts*>> users;
  for (const RankFacts& f : ranks)
    if (f.device == "cuda") users[{f.host, f.gpu.pci_bus_id}].push_back(&f);
  for (const auto& [where, group] : users)
    if (group.size() > 1) {
      int gpus = std::max(group.front()->gpus_visible, group.front()->nvidia_gpus);
      out.problem(std::to_string(group.size()) + " ranks share GPU " +
                  std::to_string(group.front()->gpu.index) + " (" + where.second + ") on " + where.first +
                  " (" + ranks_of(group) +
                  "): use --gpus-per-task=1 or --ntasks-per-node=" + std::to_string(gpus));
    }

  std::vector<const RankFacts*> with_gpu, without;
  for (const RankFacts& f : ranks) (f.device == "cuda" ? with_gpu : without).push_back(&f);
  for (const auto& [host, group] : by_host(ranks)) {
    const RankFacts& f = *group.front();
    std::string where = " on " + host + " (" + ranks_of(group) + ")";
    if (cfg.train.device == DeviceChoice::Cuda && f.device != "cuda") {
      out.problem(
          f.versions.cuda_built
              ? "--train.device cuda but no GPU is visible" + where +
                    ": request GPUs (--gpus-per-task=1 or --gres=gpu:N) and run the container with --nv"
              : "--train.device cuda but this hpctrain was built without CUDA: rebuild with CUDA=1 where "
                "nvcc is found, or use --train.device cpu");
    } else if (cfg.train.device == DeviceChoice::Auto && f.device != "cuda" && !with_gpu.empty()) {
      out.problem("no GPU is visible" + where +
                  " while other ranks use one: give every task a GPU (--gpus-per-task=1) on every node");
    } else if (f.device != "cuda" && f.nvidia_gpus > 0 && cfg.train.device != DeviceChoice::Cpu) {
      out.warning(
          host + " has " + std::to_string(f.nvidia_gpus) + " NVIDIA GPU(s) that this process cannot use" +
          (f.versions.cuda_built ? " (CUDA_VISIBLE_DEVICES=" + f.cuda_visible_devices +
                                       "): request them (--gpus-per-task=1) and run the container with --nv"
                                 : ": this hpctrain was built without CUDA; rebuild with CUDA=1"));
    }
    int local_gpu_ranks = static_cast<int>(
        std::count_if(group.begin(), group.end(), [](const RankFacts* r) { return r->device == "cuda"; }));
    if (local_gpu_ranks > 0 && local_gpu_ranks < f.gpus_visible)
      out.warning(host + " has " + std::to_string(f.gpus_visible) + " GPUs visible but " +
                  std::to_string(local_gpu_ranks) +
                  " rank(s) use them: run one rank per GPU (--ntasks-per-node=" +
                  std::to_string(f.gpus_visible) + ")");
    std::vector<const RankFacts*> single_cpu;
    for (const RankFacts* r : group)
      if (r->device == "cpu" && r->cpus == 1) single_cpu.push_back(r);
    if (!single_cpu.empty())
      out.warning(ranks_of(single_cpu) + " on " + host +
                  " may run on 1 CPU core each: CPU training runs BLAS threads; give each rank cores (srun "
                  "--cpus-per-task=N, or mpirun --bind-to none / --map-by slot:PE=N)");
  }
}

void check_network(const LaunchFacts& launch, const std::vector<RankFacts>& ranks, Findings& out) {
  const int num_nodes = ranks.empty() ? 1 : ranks.front().num_nodes;
  for (const auto& [host, group] : by_host(ranks)) {
    const RankFacts& f = *group.front();
    std::vector<std::string> devices, down;
    bool active = false;
    for (const IbPort& p : f.ib) {
      if (devices.empty() || devices.back() != p.device) devices.push_back(p.device);
      if (p.state == "ACTIVE")
        active = true;
      else
        down.push_back(p.device + " port " + std::to_string(p.port) + " " + p.state);
    }
    if (!f.ib.empty() && !active) {
      std::string text = "no InfiniBand port is ACTIVE on " + host + " (" + joined(down) +
                         "): check the cable/switch port (ibstat) or ask the admins";
      num_nodes > 1 ? out.problem(text) : out.warning(text);
    }
    if (f.ib.empty() && num_nodes > 1 && !launch.local)
      out.warning(host +
                  " has no InfiniBand adapter (/sys/class/infiniband): traffic between nodes goes over TCP "
                  "sockets, much slower; run on an InfiniBand partition if the cluster has one");
    if (!f.ib.empty() && env_of(f, "NCCL_IB_DISABLE") == "1" && num_nodes > 1)
      out.warning("NCCL_IB_DISABLE=1 on " + host + " although it has InfiniBand (" + joined(devices) +
                  "): NCCL will use TCP sockets; unset it");
    if (!f.ib.empty() && !f.ibverbs)
      out.problem("libibverbs.so.1 does not load on " + host + " although it has InfiniBand (" +
                  joined(devices) +
                  "): NCCL and UCX fall back to TCP sockets; install rdma-core/libibverbs1 in the container "
                  "(or bind the host's libibverbs and its provider libraries into it)");
    if (!f.ib.empty() && env_of(f, "OMPI_MCA_pml") == "ob1" && num_nodes > 1 &&
        env_of(f, "OMPI_MCA_btl").find("uct") == std::string::npos) {
      const std::string text = "OMPI_MCA_pml=ob1 on " + host + ", which has InfiniBand (" + joined(devices) +
                               "): Open MPI sends " + (f.device == "cpu" ? "the gradients" : "its messages") +
                               " over TCP; use OMPI_MCA_pml=ucx (or unset it and let Open MPI pick UCX)";
      f.device == "cpu" ? out.problem(text) : out.warning(text);
    }
    if (has_env(f, "NCCL_SOCKET_IFNAME") &&
        !socket_ifname_matches(env_of(f, "NCCL_SOCKET_IFNAME"), f.interfaces))
      out.problem("NCCL_SOCKET_IFNAME=" + env_of(f, "NCCL_SOCKET_IFNAME") +
                  " matches no network interface on " + host + " (it has: " + joined(f.interfaces) +
                  "): set it to one of those, or unset it");
    // Open MPI's TCP interface lists: names must exist (a subnet, a.b.c.d/n, is not checked).
    for (const char* var : {"OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"}) {
      const std::string spec = env_of(f, var);
      std::vector<std::string> absent;
      for (size_t p = 0, q; has_env(f, var) && p <= spec.size(); p = q + 1) {
        q = std::min(spec.find(',', p), spec.size());
        const std::string name = spec.substr(p, q - p);
        if (!name.empty() && name.find('/') == std::string::npos &&
            std::find(f.interfaces.begin(), f.interfaces.end(), name) == f.interfaces.end())
          absent.push_back(name);
      }
      if (!absent.empty())
        out.problem(
            std::string(var) + "=" + spec + " names " + joined(absent) + ", which " + host +
            " does not have (it has: " + joined(f.interfaces) +
            "): Open MPI cannot reach the other nodes; name an interface every node has, or a subnet");
    }
    std::vector<std::string> missing = missing_ib_hcas(env_of(f, "NCCL_IB_HCA"), f.ib);
    if (!missing.empty())
      out.problem("NCCL_IB_HCA=" + env_of(f, "NCCL_IB_HCA") + " names " + joined(missing) + ", which " +
                  host + " does not have (it has: " + joined(devices) + "): fix the list or unset it");
  }
  // The settings must agree: one rank with another NCCL_IB_HCA or UCX_TLS
  // makes the job hang or crawl. CUDA_VISIBLE_DEVICES differs by design.
  auto comparable = [](const RankFacts& f) {
    auto env = f.env;
    std::erase_if(env, [](const auto& kv) { return kv.first == "CUDA_VISIBLE_DEVICES"; });
    return env;
  };
  if (ranks.empty()) return;
  const auto reference = comparable(ranks.front());
  for (const RankFacts& f : ranks) {
    const auto env = comparable(f);
    if (env == reference) continue;
    std::string name;
    for (const auto& kv : env)
      if (std::find(reference.begin(), reference.end(), kv) == reference.end()) name = kv.first;
    for (const auto& kv : reference)
      if (name.empty() && std::find(env.begin(), env.end(), kv) == env.end()) name = kv.first;
    const std::string mine = has_env(f, name) ? "'" + env_of(f, name) + "'" : "unset";
    const std::string theirs =
        has_env(ranks.front(), name) ? "'" + env_of(ranks.front(), name) + "'" : "unset";
    out.warning("rank " + std::to_string(f.rank) + " on " + f.host +
                " has another communication environment than "
                "rank 0 (" +
                name + " " + mine + " vs " + theirs +
                "): set the same NCCL_/UCX_/OMPI_MCA_ variables on every node (sbatch --export=ALL)");
    break;
  }
}

void check_data(const std::vector<RankFacts>& ranks, Findings& out) {
  static const std::set<std::string> SHARED_FS = {"lustre", "gpfs", "nfs",  "beegfs",
                                                  "cifs",   "smb2", "ceph", "panfs"};
  std::map<std::string, std::vector<std::string>> errors;  // error → hosts
  size_t checked_nodes = 0;
  for (const RankFacts& f : ranks) {
    const DataFacts& d = f.data;
    if (!d.checked) continue;
    ++checked_nodes;
    if (!d.opens) {
      errors[d.error].push_back(f.host);
      continue;
    }
    if (f.rank != 0) continue;  // the file's own properties: rank 0's node speaks for all
    for (const SplitFacts& s : d.splits)
      if (!s.mapped)
        out.warning("'" + d.path + "' /" + s.name + " cannot be memory-mapped (" + s.why_not +
                    "): training reads it with H5Dread, slower; `hpcdata repack " + d.path +
                    " OUT.h5` writes a mappable copy");
    const std::string lock = d.locking_env;
    if (SHARED_FS.count(d.filesystem) && lock != "FALSE" && lock != "false" && lock != "0")
      out.warning(
          "HDF5 file locking is on for other tools (HDF5_USE_FILE_LOCKING " +
          (lock == "(unset)" ? std::string("unset") : "= " + lock) + ") and the data is on " + d.filesystem +
          ": hpctrain turns locking off itself, but h5py or h5dump may fail with 'unable to lock file'; "
          "export HDF5_USE_FILE_LOCKING=FALSE");
  }
  for (const auto& [error, hosts] : errors) {
    const bool missing = error.find("no such file") != std::string::npos ||
                         error.find("cannot read") != std::string::npos ||
                         error.find("directory") != std::string::npos;
    std::string where = checked_nodes < 2               ? ""
                        : hosts.size() == checked_nodes ? " (on every node)"
                                                        : " (on " + joined(hosts) + ")";
    out.problem(error + where + ": " +
                (missing
                     ? "give a --data.path that exists on every node (a shared file system) and, in a "
                       "container, bind its directory (singularity --bind DIR)"
                     : "write the file with `hpcdata pack` (`hpcdata inspect FILE` shows what it holds)"));
  }
}

void check_run_dir(const std::vector<RankFacts>& ranks, Findings& out) {
  constexpr uint64_t MIN_FREE = uint64_t(1) << 30;
  for (const RankFacts& f : ranks) {
    const RunDirFacts& d = f.run_dir;
    if (!d.checked) continue;
    if (!d.writable)
      out.problem("run directory '" + d.path + "' is not writable (" + d.probed + ": " + d.error +
                  "): choose a --run.dir on a writable file system (project or scratch space) and, in a "
                  "container, bind it (singularity --bind DIR)");
    else if (d.free_bytes < MIN_FREE)
      out.problem("only " + human_bytes(d.free_bytes) + " free for the run directory '" + d.path +
                  "': checkpoints and metrics need room; free space or choose another --run.dir");
  }
}

void check_preflight(const Preflight& pf, const std::vector<RankFacts>& ranks, Findings& out) {
  if (!pf.ran) return;
  for (const Sweep& sw : pf.sweeps) {
    auto bad =
        std::find_if(sw.rows.begin(), sw.rows.end(), [](const SweepRow& row) { return row.wrong > 0; });
    if (bad != sw.rows.end())
      out.problem("AllReduce (" + sw.communicator + ") of " + human_bytes(static_cast<uint64_t>(bad->bytes)) +
                  " returned " + std::to_string(bad->wrong) + " wrong elements: the " +
                  (sw.communicator == "nccl" ? "NCCL" : "MPI") +
                  " library or the fabric corrupts data; report it to the admins with this output");
  }
  std::vector<int> node_of;
  node_of.reserve(ranks.size());
  for (const RankFacts& f : ranks) node_of.push_back(f.node);
  SlowSpot spot = find_slow_spot(pf.links, pf.ranks, node_of);
  if (!spot.found) return;
  auto who = [&](int r) {
    const RankFacts& f = ranks[static_cast<size_t>(r)];
    return "rank " + std::to_string(r) + " on " + f.host + " (node " + std::to_string(f.node) + ")";
  };
  char times[96];
  std::snprintf(times, sizeof times, "%.2f ms vs a typical %.2f ms per %s", 1e3 * spot.seconds,
                1e3 * spot.typical, human_bytes(static_cast<uint64_t>(pf.ring_bytes)).c_str());
  std::string what, host;
  if (spot.rank >= 0) {
    what = "slowest: " + who(spot.rank) + ", every link to and from it is slow (";
    host = ranks[static_cast<size_t>(spot.rank)].host;
  } else if (spot.node >= 0) {
    auto on_node = [&](const RankFacts& f) { return f.node == spot.node; };
    host = std::find_if(ranks.begin(), ranks.end(), on_node)->host;
    what = "slowest: node " + std::to_string(spot.node) + " (" + host + "), every slow link touches it (";
  } else {
    what = "slowest link: " + who(spot.src) + " -> " + who(spot.dst) + " (";
    host = ranks[static_cast<size_t>(spot.src)].host;
  }
  out.problem(what + times +
              "): check that node (other jobs, clocks, its network port: ibstat) or leave it out "
              "(sbatch --exclude=" +
              host + ")");
}

// The node latency probe (node_latency.h): a node whose sends are late, or a slow pair.
void check_node_latency(const Preflight& pf, const std::vector<RankFacts>& ranks, Findings& out) {
  if (!pf.ran || pf.node_links.empty()) return;
  const NodeSpot spot = find_slow_node(pf.node_links, pf.nodes);
  if (!spot.found) return;
  auto host_of = [&](int node) {
    auto f = std::find_if(ranks.begin(), ranks.end(), [&](const RankFacts& r) { return r.node == node; });
    return f == ranks.end() ? std::string("?") : f->host;
  };
  auto name = [&](int node) { return "node " + std::to_string(node) + " (" + host_of(node) + ")"; };
  char times[160];
  std::snprintf(times, sizeof times, "%.2f ms one way, %.2f ms back; round trip %.2f ms for 8 bytes",
                1e3 * spot.one_way, 1e3 * spot.reverse, 1e3 * (spot.one_way + spot.reverse));
  const std::string dir = name(spot.src) + " -> " + name(spot.dst) + ": " + times;
  if (spot.node >= 0 && spot.node == spot.src)
    out.problem("slow node: " + name(spot.node) + ", its messages to other nodes arrive late (" + dir +
                "): check its network port and cable, traffic shaping on it (tc qdisc show) and other jobs "
                "there, or leave it out (sbatch --exclude=" +
                host_of(spot.node) + ")");
  else if (spot.node >= 0)
    out.problem("slow node: " + name(spot.node) + ", every slow node pair includes it (" + dir +
                "): check its network port and cable (ibstat, ethtool), or leave it out (sbatch --exclude=" +
                host_of(spot.node) + ")");
  else
    out.problem("slow link between " + name(spot.src) + " and " + name(spot.dst) + " (" + times +
                "; a data-center network needs well under 1 ms): check both nodes' ports and the switch "
                "between them, or leave one out (sbatch --exclude=" +
                host_of(spot.src) + ")");
}

}  // namespace

LaunchFacts launch_facts(int world, const std::string& pmi_problem, bool local) {
  LaunchFacts l;
  l.world = world;
  l.pmi_problem = pmi_problem;
  l.local = local;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  l.slurm_step_tasks = std::atoi(env("SLURM_STEP_NUM_TASKS").c_str());
  l.slurm_job = env("SLURM_JOB_ID");
  if (!env("OMPI_COMM_WORLD_SIZE").empty() || !env("HYDRA_CONTROL_FD").empty())
    l.launcher = "mpirun";
  else if (!env("SLURM_STEP_ID").empty() || l.slurm_step_tasks > 0)
    l.launcher = "srun";
  return l;
}

std::vector<Finding> analyse(const Config& cfg, const LaunchFacts& launch,
                             const std::vector<RankFacts>& ranks, const Preflight& preflight) {
  Findings out;
  check_launch(launch, ranks, out);
  check_versions(ranks, out);
  check_devices(cfg, ranks, out);
  check_network(launch, ranks, out);
  check_data(ranks, out);
  check_run_dir(ranks, out);
  check_preflight(preflight, ranks, out);
  check_node_latency(preflight, ranks, out);
  return out.take();
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace hpc::doctor
