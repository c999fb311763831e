// render_json() (see report.h): the report as one JSON object.
//
// Top-level keys: ok, problems, warnings (the findings' lines), launch,
// versions, train_device, ranks, nodes, environment, environment_hidden,
// container, data (null without --data.path), run_dir, preflight.
#include <cstdio>

#include "doctor/report.h"
#include "train/metrics.h"

namespace hpc::doctor {

namespace {

// Appends JSON text. Members are written as key + value in one call
// (`num("count", 3)`); open()/close() nest objects and arrays, and an empty
// key means an array element. Commas are the writer's business.
class Json {
 public:
  Json& open(const char* key, char bracket) {
    member(key);
    out_ += bracket;
    first_ = true;
    return *this;
  }
  Json& close(char bracket) {
    out_ += bracket;
    first_ = false;
    return *this;
  }
  Json& str(const char* key, const std::string& v) { return value(key, train::json_quote(v)); }
  Json& num(const char* key, long long v) { return value(key, std::to_string(v)); }
  Json& real(const char* key, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return value(key, buf);
  }
  Json& boolean(const char* key, bool v) { return value(key, v ? "true" : "false"); }
  Json& null(const char* key) { return value(key, "null"); }
  std::string take() { return std::move(out_); }

 private:
  void member(const char* key) {
    if (!first_) out_ += ',';
    first_ = false;
    if (*key) out_ += train::json_quote(key) + ":";
  }
  Json& value(const char* key, const std::string& v) {
    member(key);
    out_ += v;
    return *this;
  }
  std::string out_;
  bool first_ = true;
};

void json_versions(Json& j, const LibVersions& v) {
  auto lib = [&](const char* name, const std::string& build, const std::string& runtime) {
    j.open(name, '{').str("build", build).str("runtime", runtime).close('}');
  };
  j.open("versions", '{').str("hpctrain", v.hpctrain).boolean("cuda_built", v.cuda_built);
  lib("cuda", v.cuda_build, v.cuda_runtime);
  j.str("cuda_driver", v.cuda_driver);
  lib("cudnn", v.cudnn_build, v.cudnn_runtime);
  lib("nccl", v.nccl_build, v.nccl_runtime);
  lib("mpi", v.mpi_build, v.mpi_runtime);
  lib("hdf5", v.hdf5_build, v.hdf5_runtime);
  j.str("blas_core", v.blas_core).boolean("blas_lesser", v.blas_lesser);
  j.close('}');
}

void json_rank(Json& j, const RankFacts& f) {
  j.open("", '{').num("rank", f.rank).str("host", f.host).num("pid", f.pid);
  j.num("local_rank", f.local_rank).num("local_size", f.local_size).num("node", f.node);
  j.num("cpus", f.cpus).str("device", f.device).str("device_note", f.device_note);
  j.num("gpus_visible", f.gpus_visible).num("nvidia_gpus", f.nvidia_gpus);
  j.str("cuda_visible_devices", f.cuda_visible_devices);
  if (f.device == "cuda") {
    j.open("gpu", '{').num("index", f.gpu.index).str("name", f.gpu.name).str("pci_bus_id", f.gpu.pci_bus_id);
    j.num("total_bytes", static_cast<long long>(f.gpu.total_bytes)).close('}');
  } else {
    j.null("gpu");
  }
  j.str("mpi_runtime", f.versions.mpi_runtime).close('}');
}

void json_node(Json& j, const Report& r, const RankFacts& n) {
  j.open("", '{').num("node", n.node).str("host", n.host).open("ranks", '[');
  for (int rank : r.ranks_on_node(n.node)) j.num("", rank);
  j.close(']').open("infiniband", '[');
  for (const IbPort& p : n.ib) {
    j.open("", '{').str("device", p.device).num("port", p.port).str("state", p.state);
    j.str("rate", p.rate).str("link_layer", p.link_layer).close('}');
  }
  j.close(']').open("interfaces", '[');
  for (const std::string& i : n.interfaces) j.str("", i);
  j.close(']').close('}');
}

void json_data(Json& j, const Report& r) {
  if (r.data_path.empty()) {
    j.null("data");
    return;
  }
  j.open("data", '{').str("path", r.data_path).open("checks", '[');
  for (const RankFacts& f : r.ranks) {
    const DataFacts& d = f.data;
    if (!d.checked) continue;
    j.open("", '{').str("host", f.host).num("node", f.node).boolean("opens", d.opens).str("error", d.error);
    j.str("filesystem", d.filesystem).str("hdf5_use_file_locking", d.locking_env).open("splits", '[');
    for (const SplitFacts& s : d.splits) {
      j.open("", '{').str("split", s.name).num("samples", s.samples).str("sample_shape", s.sample_shape);
      j.str("dtype", s.dtype)
          .num("num_classes", s.num_classes)
          .boolean("mmap", s.mapped)
          .boolean("tokens", s.tokens);
      j.str("not_mapped_because", s.why_not).close('}');
    }
    j.close(']').close('}');
  }
  j.close(']').close('}');
}

void json_run_dir(Json& j, const RunDirFacts& d) {
  j.open("run_dir", '{').str("path", d.path).boolean("exists", d.exists).str("probed", d.probed);
  j.boolean("writable", d.writable)
      .str("error", d.error)
      .num("free_bytes", static_cast<long long>(d.free_bytes));
  j.str("filesystem", d.filesystem).close('}');
}

void json_preflight(Json& j, const Preflight& pf, const SlowSpot& spot) {
  j.open("preflight", '{').boolean("ran", pf.ran).str("skipped", pf.skipped).num("ranks", pf.ranks);
  j.num("bucket_bytes", pf.bucket_bytes).open("sweeps", '[');
  for (const Sweep& sw : pf.sweeps) {
    j.open("", '{').str("communicator", sw.communicator).str("buffers", sw.buffers).open("rows", '[');
    for (const SweepRow& s : sw.rows) {
      j.open("", '{').num("bytes", s.bytes).num("count", s.count).str("type", "float").str("redop", "sum");
      j.real("time_us", s.time_us).real("algbw_gbps", s.algbw).real("busbw_gbps", s.busbw);
      j.num("wrong", s.wrong).close('}');
    }
    j.close(']').open("rank_us", '[');
    for (double us : sw.rank_us) j.real("", us);
    j.close(']').close('}');
  }
  j.close(']').str("gpu_skipped", pf.gpu_skipped).num("ring_bytes", pf.ring_bytes).open("links", '[');
  for (const LinkTime& l : pf.links)
    j.open("", '{').num("src", l.src).num("dst", l.dst).real("ms", 1e3 * l.seconds).close('}');
  j.close(']');
  if (spot.found) {
    j.open("slowest", '{')
        .num("rank", spot.rank)
        .num("node", spot.node)
        .num("src", spot.src)
        .num("dst", spot.dst);
    j.real("ms", 1e3 * spot.seconds).real("typical_ms", 1e3 * spot.typical).close('}');
  } else {
    j.null("slowest");
  }
  j.open("node_links", '[');
  for (const NodeLink& l : pf.node_links)
    j.open("", '{').num("src", l.src).num("dst", l.dst).real("one_way_ms", 1e3 * l.one_way).close('}');
  j.close(']');
  const NodeSpot node = find_slow_node(pf.node_links, pf.nodes);
  if (node.found) {
    j.open("slow_node", '{').num("node", node.node).num("src", node.src).num("dst", node.dst);
    j.real("one_way_ms", 1e3 * node.one_way).real("reverse_ms", 1e3 * node.reverse).close('}');
  } else {
    j.null("slow_node");
  }
  j.close('}');
}

}  // namespace

std::string render_json(const Report& r) {
  const RankFacts& me = r.ranks.front();
  Json j;
  j.open("", '{').boolean("ok", r.problems() == 0).open("problems", '[');
  for (const Finding& f : r.findings)
    if (f.severity == Severity::Problem) j.str("", f.text);
  j.close(']').open("warnings", '[');
  for (const Finding& f : r.findings)
    if (f.severity == Severity::Warning) j.str("", f.text);
  j.close(']');
  j.open("launch", '{').str("launcher", r.launch.launcher).num("world", me.world).num("nodes", me.num_nodes);
  j.num("slurm_step_tasks", r.launch.slurm_step_tasks).str("slurm_job", r.launch.slurm_job);
  j.boolean("consistent", r.launch.pmi_problem.empty()).boolean("local", r.launch.local).close('}');
  json_versions(j, me.versions);
  j.str("train_device", r.train_device).open("ranks", '[');
  for (const RankFacts& f : r.ranks) json_rank(j, f);
  j.close(']').open("nodes", '[');
  for (const RankFacts* n : r.node_leaders()) json_node(j, r, *n);
  j.close(']').open("environment", '{');
  for (const auto& [k, v] : me.env) j.str(k.c_str(), v);
  j.close('}').num("environment_hidden", me.env_hidden).str("container", me.container);
  json_data(j, r);
  json_run_dir(j, me.run_dir);
  json_preflight(j, r.preflight, r.slow_spot());
  j.close('}');
  return j.take() + "\n";
}

}  // namespace hpc::doctor
