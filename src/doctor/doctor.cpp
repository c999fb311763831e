// The doctor's flow (see doctor.h):
//
//   1. every rank probes itself (collect): device, libraries, network,
//      environment; local rank 0 of each node the data file (every node must
//      see it); rank 0 the run directory (the only writer)
//   2. rank 0 gathers the facts (Context::gather_lines)
//   3. all ranks run the preflight (collective)
//   4. rank 0 analyses, prints, and broadcasts the exit code, so that every
//      rank, and therefore srun and mpirun, exits with it
//
// Context refuses a launch where srun started N tasks but MPI sees a world
// of 1 (PMI mismatch), and has already finalised MPI when it says so. The
// doctor turns that refusal into a finding and reports on this process
// alone; every task is its own "rank 0" then, so only Slurm's task 0 prints.
#include "doctor/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "backend/device.h"
#include "core/check.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist/context.h"
#include "dist/devices.h"
#include "doctor/analysis.h"
#include "doctor/data_probe.h"
#include "doctor/facts.h"
#include "doctor/flight.h"
#include "doctor/preflight.h"
#include "doctor/probes.h"
#include "doctor/report.h"
#include "doctor/versions.h"
#include "train/memory_model.h"

extern char** environ;

namespace hpc::doctor {

namespace {

bool is_bool_word(std::string w) {
  std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* b : {"true", "false", "1", "0", "yes", "no", "on", "off"})
    if (w == b) return true;
  return false;
}

// The device this rank would train on, by training's own rule (dist::pick_device).
void choose_device(const Config& cfg, int local_rank, RankFacts& f) {
  f.gpus_visible = backend::cuda_device_count();
  f.nvidia_gpus = nvidia_gpus_present();
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  f.cuda_visible_devices = cvd ? cvd : "(unset)";
  f.device = "cpu";
  if (cfg.train.device == DeviceChoice::Cpu) {
    f.device_note = "--train.device cpu";
  } else if (!backend::cuda_built()) {
    f.device_note = "hpctrain built without CUDA";
  } else if (f.gpus_visible == 0) {
    f.device_note = "no GPU visible";
  } else {
    try {
      backend::DeviceInfo d = backend::cuda_device_info(dist::pick_device(local_rank, f.gpus_visible));
      f.gpu = {d.index, d.name, d.pci_bus_id, static_cast<uint64_t>(d.total_bytes)};
      f.device = "cuda";
    } catch (const Error& e) {
      f.device_note = e.what();
    }
  }
}

// The launcher's and the user's settings, read before MPI_Init: Open MPI
// adds variables of its own to the environment while it starts.
struct EnvSnapshot {
  std::vector<std::pair<std::string, std::string>> vars;
  int hidden = 0;
};

RankFacts collect(const Config& cfg, const EnvSnapshot& env, const dist::RankInfo& info, bool with_data,
                  bool with_run_dir) {
  RankFacts f;
  f.rank = info.rank, f.world = info.world, f.local_rank = info.local_rank, f.local_size = info.local_size;
  f.node = info.node, f.num_nodes = info.num_nodes, f.host = info.host, f.pid = info.pid;
  f.cpus = affinity_cpus();
  choose_device(cfg, info.local_rank, f);
  f.versions = library_versions();
  f.ib = scan_infiniband();
  f.ibverbs = library_loads("libibverbs.so.1");
  if (!f.gpu.pci_bus_id.empty()) f.gpu.numa_node = gpu_numa_node(f.gpu.pci_bus_id);
  f.interfaces = network_interfaces();
  f.env = env.vars;
  f.env_hidden = env.hidden;
  for (const char* name : {"APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"})
    if (const char* v = std::getenv(name); v && f.container.empty()) f.container = v;
  if (with_data && !cfg.data.path.empty()) f.data = probe_data(cfg.data.path, cfg.data.val_path);
  if (with_run_dir) f.run_dir = check_run_dir(cfg.run_dir);
  return f;
}

dist::RankInfo this_process_only() {
  dist::RankInfo info;
  info.host = host_name();
  info.pid = static_cast<int>(getpid());
  return info;
}

int print_report(Report& r, const Config& cfg) {
  r.data_path = cfg.data.path;
  r.train_device = name_of(cfg.train.device);
  r.findings = analyse(cfg, r.launch, r.ranks, r.preflight);
  const std::string text = cfg.json ? render_json(r) : render_text(r);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return r.problems() > 0 ? EXIT_NEEDS_FIXING : EXIT_OK;
}

// One process, no MPI: --local, or after Context refused the launch.
int run_alone(const Config& cfg, const EnvSnapshot& env, const std::string& pmi_problem,
              const std::string& skipped) {
  Report r;
  r.launch = launch_facts(1, pmi_problem, cfg.local);
  r.ranks.push_back(collect(cfg, env, this_process_only(), true, true));
  r.preflight.skipped = skipped;
  return print_report(r, cfg);
}

int run_distributed(const Config& cfg, const EnvSnapshot& env, dist::Context& ctx) {
  const dist::RankInfo& info = ctx.info();
  RankFacts mine = collect(cfg, env, info, info.local_rank == 0, ctx.is_root());
  std::vector<std::string> lines = ctx.gather_lines(encode(mine));
  Report r;
  r.preflight = run_preflight(ctx, cfg, mine.device == "cuda" ? mine.gpu.index : -1);
  int code = EXIT_OK;
  if (ctx.is_root()) {
    r.launch = launch_facts(info.world, dist::check_launch(info.world), false);
    for (const std::string& line : lines) r.ranks.push_back(decode(line));
    code = print_report(r, cfg);
  }
  int32_t shared = code;
  ctx.host_comm().broadcast(Tensor::borrow(&shared, Shape{1}, DType::I32), 0);
  return shared;
}

}  // namespace

Args::Args(int argc, const char* const* argv) : words_(argv, argv + argc) {
  const bool doctor = argc > 1 && words_[1] == "doctor";
  for (size_t i = 2; doctor && i < words_.size(); ++i)
    if ((words_[i] == "--json" || words_[i] == "--local") &&
        (i + 1 == words_.size() || !is_bool_word(words_[i + 1])))
      words_[i] += "=true";
  for (const std::string& w : words_) ptrs_.push_back(w.c_str());
}

int run(const Config& cfg, int* argc, char*** argv) {
  if (!cfg.flight_dir.empty()) return run_flight(cfg.flight_dir);  // a post-mortem: files only, no MPI
  if (cfg.memory_ranks > 0) {                                      // arithmetic on the model's layout: no MPI
    try {
      train::print_memory_model(cfg, static_cast<int>(cfg.memory_ranks));
      return EXIT_OK;
    } catch (const Error& e) {
      std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
      return e.exit_code();
    }
  }
  EnvSnapshot env;
  env.vars = fabric_environment(environ, &env.hidden);
  if (cfg.local) return run_alone(cfg, env, "", "--local: no other ranks");
  std::unique_ptr<dist::Context> ctx;
  try {
    ctx = std::make_unique<dist::Context>(argc, argv, cfg.dist);
  } catch (const UserError& e) {
    // The PMI mismatch, found with a world of 1 after MPI_Finalize, is a
    // finding; any other refusal (a malformed test variable) is an error.
    if (e.what() != dist::check_launch(1)) {
      std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
      return e.exit_code();
    }
    const char* task = std::getenv("SLURM_PROCID");
    if (task && std::atoi(task) != 0) return EXIT_NEEDS_FIXING;  // task 0 reports for all
    return run_alone(cfg, env, e.what(), "the launch is broken (see problems)");
  }
  try {
    return run_distributed(cfg, env, *ctx);
  } catch (const Error& e) {
    std::fprintf(stderr, "hpctrain: error on rank %d: %s\n", ctx->rank(), e.what());
    ctx->abort(e.exit_code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpctrain: error on rank %d: %s\n", ctx->rank(), e.what());
    ctx->abort(EXIT_INTERNAL);
  }
}

}  // namespace hpc::doctor
