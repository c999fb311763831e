// render_text() (see report.h).
//
// Text: sections in the order a cluster user checks things (versions, where
// the ranks are and what device each has, network, data, run directory,
// preflight), then the findings, then one summary line. Per-node facts
// (InfiniBand, interfaces) come from the node's first rank.
#include "doctor/report.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "doctor/probes.h"

namespace hpc::doctor {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(s.data(), s.size(), fmt, again);
  va_end(again);
  s.pop_back();
  return s;
}

std::string device_text(const RankFacts& f) {
  if (f.device != "cuda") return "cpu (" + f.device_note + ")";
  std::string numa = f.gpu.numa_node >= 0 ? format(", NUMA %d", f.gpu.numa_node) : "";
  return format("cuda:%d %s, %s, %s%s", f.gpu.index, f.gpu.name.c_str(), f.gpu.pci_bus_id.c_str(),
                human_bytes(f.gpu.total_bytes).c_str(), numa.c_str());
}

std::string ib_text(const RankFacts& f) {
  if (f.ib.empty()) return "none";
  std::string s;
  for (const IbPort& p : f.ib)
    s += (s.empty() ? "" : ", ") + p.device + ":" + std::to_string(p.port) + " " + p.state + " " + p.rate +
         " " + p.link_layer + (p.numa_node >= 0 ? " NUMA " + std::to_string(p.numa_node) : "");
  return s;
}

std::string list_text(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s.empty() ? "none" : s;
}

void versions_text(std::string& out, const LibVersions& v) {
  auto row = [&](const char* name, const std::string& build, const std::string& loaded) {
    out += format("  %-9s %-18s %s\n", name, build.empty() ? "-" : build.c_str(), loaded.c_str());
  };
  out += format("versions    %-18s %s\n", "built with", "loaded now");
  out += "  hpctrain  " + v.hpctrain + "\n";
  if (v.cuda_built) {
    row("CUDA", v.cuda_build,
        "runtime " + v.cuda_runtime + ", driver " + (v.cuda_driver.empty() ? "none" : v.cuda_driver));
    row("cuDNN", v.cudnn_build, v.cudnn_runtime);
    row("NCCL", v.nccl_build, v.nccl_runtime);
  } else {
    row("CUDA", "", "not built (CPU-only hpctrain)");
  }
  row("MPI", v.mpi_build, v.mpi_runtime);
  row("HDF5", v.hdf5_build, v.hdf5_runtime);
  out += "  BLAS core " + v.blas_core + "\n";
}

void data_text(std::string& out, const Report& r) {
  out += "\ndata\n";
  if (r.data_path.empty()) {
    out += "  not checked: give --data.path FILE to check the training file\n";
    return;
  }
  for (const RankFacts& f : r.ranks) {
    const DataFacts& d = f.data;
    if (!d.checked) continue;
    const std::string where = r.ranks.front().num_nodes > 1 ? " on " + f.host : "";
    if (!d.opens) {
      out += "  " + d.path + where + ": does not open (see problems)\n";
      continue;
    }
    out += "  " + d.path + where + " (" + d.filesystem + "): opens and validates\n";
    if (f.rank != 0) continue;
    for (const SplitFacts& s : d.splits)
      if (s.tokens)
        out +=
            format("  /%-6s %lld tokens of %s, vocabulary %lld, %s\n", s.name.c_str(),
                   static_cast<long long>(s.samples), s.dtype.c_str(), static_cast<long long>(s.num_classes),
                   s.mapped ? "memory-mapped" : ("not memory-mapped: " + s.why_not).c_str());
      else
        out += format(
            "  /%-6s %lld samples of %s %s%s, %s\n", s.name.c_str(), static_cast<long long>(s.samples),
            s.sample_shape.c_str(), s.dtype.c_str(),
            s.num_classes ? format(", %lld classes", static_cast<long long>(s.num_classes)).c_str() : "",
            s.mapped ? "memory-mapped" : ("not memory-mapped: " + s.why_not).c_str());
    out +=
        "  HDF5 file locking: off for hpctrain (it opens data read-only with locking disabled); "
        "HDF5_USE_FILE_LOCKING " +
        (d.locking_env == "(unset)" ? "unset" : "= " + d.locking_env) + " for other tools\n";
  }
}

void preflight_text(std::string& out, const Preflight& pf, const SlowSpot& spot) {
  if (!pf.ran) {
    out += "\npreflight: skipped (" + pf.skipped + ")\n";
    return;
  }
  for (const Sweep& sw : pf.sweeps) {
    out += format(
        "\npreflight: AllReduce float32 sum over %d ranks (%s, %s buffers), bucket %s (dist.bucket_mb)\n",
        pf.ranks, sw.communicator.c_str(), sw.buffers.c_str(),
        human_bytes(static_cast<uint64_t>(pf.bucket_bytes)).c_str());
    out += format("  %12s %12s %6s %6s %12s %12s %12s %7s\n", "size", "count", "type", "redop", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    for (const SweepRow& s : sw.rows)
      out += format("  %12lld %12lld %6s %6s %12.1f %12.3f %12.3f %7lld\n", static_cast<long long>(s.bytes),
                    static_cast<long long>(s.count), "float", "sum", s.time_us, s.algbw, s.busbw,
                    static_cast<long long>(s.wrong));
  }
  if (!pf.gpu_skipped.empty()) out += "  no NCCL sweep: " + pf.gpu_skipped + "\n";
  if (pf.links.empty()) return;
  const LinkTime& slow =
      *std::max_element(pf.links.begin(), pf.links.end(),
                        [](const LinkTime& a, const LinkTime& b) { return a.seconds < b.seconds; });
  std::vector<double> t;
  for (const LinkTime& l : pf.links) t.push_back(l.seconds);
  std::sort(t.begin(), t.end());
  out += format(
      "  ring exchange, %s from each neighbour: median %.3f ms, slowest link rank %d -> rank %d %.3f ms%s\n",
      human_bytes(static_cast<uint64_t>(pf.ring_bytes)).c_str(), 1e3 * t[t.size() / 2], slow.src, slow.dst,
      1e3 * slow.seconds, spot.found ? " (an outlier: see problems)" : "");
  if (pf.node_links.empty()) return;
  out += "  node latency, 8 bytes between the nodes' first ranks, one way (least of 9):";
  size_t shown = 0;
  for (const NodeLink& l : pf.node_links) {
    if (shown++ == 16) {
      out += " …";
      break;
    }
    out += format("%s node %d -> %d %.3f ms", shown > 1 ? "," : "", l.src, l.dst, 1e3 * l.one_way);
  }
  out += find_slow_node(pf.node_links, pf.nodes).found ? " (an outlier: see problems)\n" : "\n";
}

}  // namespace

std::vector<const RankFacts*> Report::node_leaders() const {
  std::vector<const RankFacts*> out;
  for (const RankFacts& f : ranks)
    if (std::none_of(out.begin(), out.end(), [&](const RankFacts* o) { return o->node == f.node; }))
      out.push_back(&f);
  return out;
}

std::vector<int> Report::ranks_on_node(int node) const {
  std::vector<int> out;
  for (const RankFacts& f : ranks)
    if (f.node == node) out.push_back(f.rank);
  return out;
}

SlowSpot Report::slow_spot() const {
  std::vector<int> node_of;
  for (const RankFacts& f : ranks) node_of.push_back(f.node);
  return find_slow_spot(preflight.links, preflight.ranks, node_of);
}

int Report::problems() const {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(),
                                        [](const Finding& f) { return f.severity == Severity::Problem; }));
}
int Report::warnings() const { return static_cast<int>(findings.size()) - problems(); }

std::string render_text(const Report& r) {
  const RankFacts& me = r.ranks.front();
  std::string out;
  out += format("hpctrain doctor: %d rank%s on %d node%s, %s%s\n\n", me.world, me.world == 1 ? "" : "s",
                me.num_nodes, me.num_nodes == 1 ? "" : "s",
                r.launch.launcher == "none" ? "no launcher" : ("launched by " + r.launch.launcher).c_str(),
                r.launch.local ? " (--local: this process only, no MPI)" : "");
  versions_text(out, me.versions);

  out += "\nnodes\n";
  for (const RankFacts* n : r.node_leaders()) {
    const std::vector<int> on_node = r.ranks_on_node(n->node);
    out += format("  node %-3d %-24s %2zu rank(s): %-10s %d GPU(s) visible, %d NVIDIA GPU(s) on the node\n",
                  n->node, n->host.c_str(), on_node.size(), rank_list(on_node).c_str(), n->gpus_visible,
                  n->nvidia_gpus);
  }
  out += format("  %5s  %-24s %-8s %-6s %-5s %-5s %s\n", "rank", "host", "pid", "local", "node", "cpus",
                "device");
  for (const RankFacts& f : r.ranks)
    out +=
        format("  %5d  %-24s %-8d %-6s %-5d %-5d %s\n", f.rank, f.host.c_str(), f.pid,
               format("%d/%d", f.local_rank, f.local_size).c_str(), f.node, f.cpus, device_text(f).c_str());

  out += "\nnetwork\n";
  for (const RankFacts* n : r.node_leaders()) {
    out += "  " + n->host + ": InfiniBand " + ib_text(*n) + "\n";
    out += "  " + n->host + ": interfaces " + list_text(n->interfaces) + "\n";
  }
  out += "  environment (rank 0):";
  for (const auto& [k, v] : me.env) out += " " + k + "=" + v;
  if (me.env.empty()) out += " no NCCL_/UCX_/OMPI_MCA_/PMIX_MCA_ settings";
  if (me.env_hidden) out += format(" (+%d set by the launcher itself)", me.env_hidden);
  out += "\n  container: " + (me.container.empty() ? std::string("none") : me.container) + "\n";

  data_text(out, r);

  out += "\nrun directory\n";
  for (const RankFacts& f : r.ranks)
    if (f.run_dir.checked) {
      const RunDirFacts& d = f.run_dir;
      out += "  " + d.path + (d.exists ? "" : " (will be created in " + d.probed + ")") + ": " +
             (d.writable ? "writable, " + human_bytes(d.free_bytes) + " free (" + d.filesystem + ")"
                         : "NOT writable (" + d.probed + ": " + d.error + ")") +
             "\n";
    }

  preflight_text(out, r.preflight, r.slow_spot());

  out += "\n";
  for (const Finding& f : r.findings)
    out += std::string(f.severity == Severity::Problem ? "problem: " : "warning: ") + f.text + "\n";
  if (r.problems() == 0)
    out += format("doctor: ready: no problems found (%d warning(s))\n", r.warnings());
  else
    out += format("doctor: %d problem(s) need fixing, %d warning(s)\n", r.problems(), r.warnings());
  return out;
}

}  // namespace hpc::doctor
