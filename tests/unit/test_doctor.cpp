// Tests of `hpctrain doctor`'s parts that need no MPI job: the rank-report
// wire format, the local probes on planted trees (InfiniBand sysfs, run
// directories, data files), NCCL's interface/HCA list semantics, the
// preflight arithmetic and outlier rule, every analysis rule with planted
// facts (each must fire on its problem and stay silent on a healthy job),
// the bare-switch argv rewrite, and the JSON rendering.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "doctor/analysis.h"
#include "doctor/data_probe.h"
#include "doctor/doctor.h"
#include "doctor/facts.h"
#include "doctor/preflight.h"
#include "doctor/probes.h"
#include "doctor/report.h"
#include "doctor/versions.h"

namespace hpc::doctor {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hpctrain-test-doctor.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string path(const std::string& name = "") const { return name.empty() ? path_ : path_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path(path(name)).parent_path());
    std::ofstream(path(name)) << text;
  }

 private:
  std::string path_;
};

// A healthy CPU rank of a `world`-rank job with `per_node` ranks per node.
RankFacts cpu_rank(int rank, int world, int per_node = 2) {
  RankFacts f;
  f.rank = rank, f.world = world, f.local_rank = rank % per_node, f.local_size = per_node;
  f.node = rank / per_node, f.num_nodes = (world + per_node - 1) / per_node;
  f.host = "node" + std::to_string(f.node);
  f.pid = 1000 + rank;
  f.cpus = 8;
  f.device = "cpu";
  f.device_note = "no GPU visible";
  f.cuda_visible_devices = "(unset)";
  f.versions.hpctrain = "0.1.0 (commit x)";
  f.versions.mpi_build = "Open MPI 4.1.4";
  f.versions.mpi_runtime = "Open MPI v4.1.4, package: Debian OpenMPI";
  f.versions.hdf5_build = f.versions.hdf5_runtime = "1.10.8";
  f.ib = {{"mlx5_0", 1, "ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand"}};
  f.interfaces = {"eth0", "ib0", "lo"};
  return f;
}

std::vector<RankFacts> cpu_job(int world, int per_node = 2) {
  std::vector<RankFacts> ranks;
  ranks.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) ranks.push_back(cpu_rank(r, world, per_node));
  return ranks;
}

void give_gpu(RankFacts& f, int index, const std::string& pci, int visible = 4) {
  f.device = "cuda";
  f.device_note.clear();
  f.gpus_visible = visible;
  f.nvidia_gpus = 4;
  f.versions.cuda_built = true;
  f.gpu = {index, "NVIDIA H100", pci, 80ull << 30};
}

std::vector<std::string> texts(const std::vector<Finding>& fs_, Severity s) {
  std::vector<std::string> out;
  for (const Finding& f : fs_)
    if (f.severity == s) out.push_back(f.text);
  return out;
}

// The one problem of `ranks`, which must contain every piece of `parts`.
void expect_one_problem(const std::vector<Finding>& found, const std::vector<std::string>& parts) {
  std::vector<std::string> problems = texts(found, Severity::Problem);
  ASSERT_EQ(problems.size(), 1u) << (problems.empty() ? "no problem" : problems[0] + " | " + problems.back());
  for (const std::string& p : parts)
    EXPECT_NE(problems[0].find(p), std::string::npos) << p << " not in: " << problems[0];
  EXPECT_EQ(problems[0].find('\n'), std::string::npos) << "a finding must be one line";
}

// One default Config for every test: a temporary Config{} per call makes GCC 12 at -O3 warn
// (-Wmaybe-uninitialized, a false positive inside std::string) once Config holds enough strings.
const Config& default_config() {
  static const Config c;
  return c;
}

std::vector<Finding> analyse_ranks(const std::vector<RankFacts>& ranks,
                                   const Config& cfg = default_config()) {
  LaunchFacts launch;
  launch.world = static_cast<int>(ranks.size());
  return analyse(cfg, launch, ranks, Preflight{});
}

// ---- wire format -------------------------------------------------------------

TEST(DoctorFacts, EncodeDecodeRoundTripKeepsEveryField) {
  RankFacts f = cpu_rank(3, 8, 4);
  give_gpu(f, 1, "0000:3b:00.0");
  f.host = "host:with:colons 12:34";  // the length prefix, not a separator, delimits values
  f.device_note = "line one\nline two";
  f.env = {{"NCCL_IB_HCA", "mlx5_0:1"}, {"UCX_TLS", ""}};
  f.env_hidden = 22;
  f.data.checked = true;
  f.data.path = "/data/x.h5";
  f.data.splits = {{"train", 60000, "1x28x28", "uint8", 10, true, "", false},
                   {"val", 7, "3", "float32", 0, false, "x; y", false}};
  f.run_dir = check_run_dir(fs::temp_directory_path().string());
  f.versions.nccl_runtime = "2.28.9";
  RankFacts g = decode(encode(f));
  EXPECT_EQ(encode(g), encode(f));
  EXPECT_EQ(g.host, f.host);
  EXPECT_EQ(g.device_note, f.device_note);
  EXPECT_EQ(g.gpu.pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(g.gpu.total_bytes, 80ull << 30);
  EXPECT_EQ(g.env, f.env);
  EXPECT_EQ(g.env_hidden, 22);
  ASSERT_EQ(g.data.splits.size(), 2u);
  EXPECT_EQ(g.data.splits[1].why_not, "x; y");
  EXPECT_EQ(g.data.splits[0].samples, 60000);
  EXPECT_EQ(g.run_dir.free_bytes, f.run_dir.free_bytes);
  EXPECT_EQ(g.versions.nccl_runtime, "2.28.9");
  EXPECT_EQ(g.ib[0].rate, "200 Gb/sec (4X HDR)");
}

TEST(DoctorFacts, DecodeRejectsTruncatedInput) {
  std::string text = encode(cpu_rank(0, 1));
  EXPECT_THROW(decode(text.substr(0, text.size() - 3)), std::runtime_error);
  EXPECT_THROW(decode(text + "1:x"), std::runtime_error);
}

// ---- local probes --------------------------------------------------------------

TEST(DoctorProbes, InfiniBandFromPlantedSysfs) {
  TempDir t;
  t.write("mlx5_1/ports/1/state", "1: DOWN\n");
  t.write("mlx5_1/ports/1/rate", "10 Gb/sec (4X SDR)\n");
  t.write("mlx5_1/ports/1/link_layer", "InfiniBand\n");
  t.write("mlx5_0/ports/1/state", "4: ACTIVE\n");
  t.write("mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  t.write("mlx5_0/ports/1/link_layer", "InfiniBand\n");
  t.write("mlx5_0/ports/2/state", "4: ACTIVE\n");
  std::vector<IbPort> ports = scan_infiniband(t.path());
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_EQ(ports[0].port, 1);
  EXPECT_EQ(ports[0].state, "ACTIVE");
  EXPECT_EQ(ports[0].rate, "200 Gb/sec (4X HDR)");
  EXPECT_EQ(ports[1].port, 2);
  EXPECT_EQ(ports[2].device, "mlx5_1");
  EXPECT_EQ(ports[2].state, "DOWN");
  EXPECT_TRUE(scan_infiniband(t.path("absent")).empty());
}

TEST(DoctorProbes, NcclSocketIfnameSemantics) {
  const std::vector<std::string> ifs = {"eth0", "ib0", "lo"};
  EXPECT_TRUE(socket_ifname_matches("eth", ifs));   // prefix
  EXPECT_TRUE(socket_ifname_matches("=ib0", ifs));  // exact
  EXPECT_FALSE(socket_ifname_matches("=eth", ifs));
  EXPECT_FALSE(socket_ifname_matches("enp65s0", ifs));
  EXPECT_TRUE(socket_ifname_matches("enp65s0,ib", ifs));   // any entry
  EXPECT_TRUE(socket_ifname_matches("^lo,docker", ifs));   // exclusion leaves eth0, ib0
  EXPECT_FALSE(socket_ifname_matches("^lo,eth,ib", ifs));  // excludes everything
}

TEST(DoctorProbes, NcclIbHcaNamesMissingDevices) {
  const std::vector<IbPort> ports = {{"mlx5_0", 1, "ACTIVE", "", ""}, {"mlx5_1", 1, "ACTIVE", "", ""}};
  EXPECT_TRUE(missing_ib_hcas("mlx5_0:1,mlx5_1", ports).empty());
  EXPECT_TRUE(missing_ib_hcas("mlx5", ports).empty());  // prefix
  EXPECT_EQ(missing_ib_hcas("mlx5_0,mlx5_9:1", ports), std::vector<std::string>{"mlx5_9"});
  EXPECT_EQ(missing_ib_hcas("=mlx5", ports), std::vector<std::string>{"mlx5"});  // exact: no such device
  EXPECT_TRUE(missing_ib_hcas("^mlx5_9", ports).empty());                        // exclusions ask for nothing
}

TEST(DoctorProbes, FabricEnvironmentKeepsTuningDropsLauncherBookkeeping) {
  std::vector<std::string> vars = {"NCCL_DEBUG=INFO",
                                   "OMPI_MCA_btl=^openib",
                                   "OMPI_MCA_orte_hnp_uri=1.0;tcp://x",
                                   "OMPI_MCA_ess_base_vpid=3",
                                   "HOME=/root",
                                   "UCX_TLS=rc,sm",
                                   "HDF5_USE_FILE_LOCKING=FALSE",
                                   "PMIX_MCA_gds=hash",
                                   "PMIX_RANK=3"};
  std::vector<char*> env;
  env.reserve(vars.size() + 1);
  for (std::string& v : vars) env.push_back(v.data());
  env.push_back(nullptr);
  int hidden = -1;
  auto got = fabric_environment(env.data(), &hidden);
  std::vector<std::pair<std::string, std::string>> want = {{"HDF5_USE_FILE_LOCKING", "FALSE"},
                                                           {"NCCL_DEBUG", "INFO"},
                                                           {"OMPI_MCA_btl", "^openib"},
                                                           {"PMIX_MCA_gds", "hash"},
                                                           {"UCX_TLS", "rc,sm"}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(hidden, 2);
}

TEST(DoctorProbes, RunDirWritableExistingAndToBeCreated) {
  TempDir t;
  RunDirFacts d = check_run_dir(t.path());
  EXPECT_TRUE(d.exists);
  EXPECT_TRUE(d.writable) << d.error;
  EXPECT_GT(d.free_bytes, 0u);
  EXPECT_TRUE(fs::is_empty(t.path())) << "the probe file must be removed";

  d = check_run_dir(t.path("runs/a/b"));
  EXPECT_FALSE(d.exists);
  EXPECT_EQ(d.probed, t.path());
  EXPECT_TRUE(d.writable) << d.error;
  EXPECT_FALSE(fs::exists(t.path("runs"))) << "the doctor must not create the run directory";
}

TEST(DoctorProbes, RunDirUnderAFileOrReadOnlyIsNotWritable) {
  TempDir t;
  t.write("file", "x");
  RunDirFacts d = check_run_dir(t.path("file/run"));
  EXPECT_FALSE(d.writable);
  EXPECT_NE(d.error.find("not a directory"), std::string::npos) << d.error;
  if (geteuid() != 0) {  // root writes through any mode bits
    fs::create_directory(t.path("ro"));
    fs::permissions(t.path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    d = check_run_dir(t.path("ro"));
    EXPECT_FALSE(d.writable);
    EXPECT_NE(d.error.find("ermission"), std::string::npos) << d.error;
  }
}

TEST(DoctorProbes, HumanBytes) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(25ull << 20), "25.0 MiB");
  EXPECT_EQ(human_bytes(3ull << 40), "3.0 TiB");
}

TEST(DoctorVersions, MajorMinorParsesLibraryStrings) {
  EXPECT_EQ(major_minor("Open MPI v4.1.4, package: Debian OpenMPI"), 4001);
  EXPECT_EQ(major_minor("13.0"), 13000);
  EXPECT_EQ(major_minor("MPICH Version: 4.2.0"), 4002);
  EXPECT_EQ(major_minor("none"), -1);
  LibVersions v = library_versions();
  EXPECT_NE(v.mpi_runtime.find("MPI"), std::string::npos) << v.mpi_runtime;
  EXPECT_EQ(major_minor(v.hdf5_build), major_minor(v.hdf5_runtime));
  EXPECT_NE(v.hpctrain.find("commit"), std::string::npos);
}

// ---- data file ---------------------------------------------------------------

// /train/x (n × 4 float32) and /train/y (n int32 in [0, 3)), contiguous or chunked + deflate.
void write_dataset_file(const std::string& path, bool chunked) {
  const hsize_t n = 64, dims_x[2] = {n, 4};
  std::vector<float> x(n * 4);
  std::vector<int32_t> y(n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 3);
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t group = H5Gcreate2(file, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunked) {
    const hsize_t chunk[2] = {8, 4};
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 4);
  }
  hid_t sx = H5Screate_simple(2, dims_x, nullptr), sy = H5Screate_simple(1, &n, nullptr);
  hid_t dx = H5Dcreate2(file, "/train/x", H5T_IEEE_F32LE, sx, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  hid_t dy = H5Dcreate2(file, "/train/y", H5T_STD_I32LE, sy, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dx, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data());
  H5Dwrite(dy, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data());
  for (hid_t d : {dx, dy}) H5Dclose(d);
  for (hid_t s : {sx, sy}) H5Sclose(s);
  H5Pclose(dcpl);
  H5Gclose(group);
  H5Fclose(file);
}

TEST(DoctorData, ContiguousFileOpensAndIsMapped) {
  TempDir t;
  write_dataset_file(t.path("ok.h5"), false);
  DataFacts d = probe_data(t.path("ok.h5"), "");
  ASSERT_TRUE(d.opens) << d.error;
  ASSERT_EQ(d.splits.size(), 1u);
  EXPECT_EQ(d.splits[0].samples, 64);
  EXPECT_EQ(d.splits[0].sample_shape, "4");
  EXPECT_EQ(d.splits[0].num_classes, 3);
  EXPECT_TRUE(d.splits[0].mapped) << d.splits[0].why_not;
  EXPECT_FALSE(d.filesystem.empty());
}

TEST(DoctorData, CompressedFileOpensButIsNotMappedAndSaysWhy) {
  TempDir t;
  write_dataset_file(t.path("gz.h5"), true);
  DataFacts d = probe_data(t.path("gz.h5"), "");
  ASSERT_TRUE(d.opens) << d.error;
  EXPECT_FALSE(d.splits[0].mapped);
  EXPECT_NE(d.splits[0].why_not.find("/train/x"), std::string::npos) << d.splits[0].why_not;
  RankFacts f = cpu_rank(0, 1);
  f.data = d;
  std::vector<std::string> w = texts(analyse_ranks({f}), Severity::Warning);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("hpcdata repack"), std::string::npos) << w[0];
}

TEST(DoctorData, MissingAndNonHdf5FilesAreOneLineProblems) {
  TempDir t;
  t.write("text.h5", "not hdf5\n");
  for (const std::string& name : {std::string("missing.h5"), std::string("text.h5")}) {
    RankFacts f = cpu_rank(0, 1);
    f.data = probe_data(t.path(name), "");
    EXPECT_FALSE(f.data.opens);
    expect_one_problem(analyse_ranks({f}), {name, name == "missing.h5" ? "--bind" : "hpcdata pack"});
  }
}

// ---- preflight arithmetic -------------------------------------------------------

TEST(DoctorPreflight, SweepSizesAroundTheBucket) {
  EXPECT_EQ(sweep_sizes(25 << 20), (std::vector<int64_t>{1638400, 6553600, 26214400, 52428800}));
  EXPECT_EQ(sweep_sizes(4096), (std::vector<int64_t>{4096, 8192}));  // never below 4 KiB, no repeats
}

TEST(DoctorPreflight, BusBandwidthIsNcclTestsFormula) {
  EXPECT_DOUBLE_EQ(bus_bandwidth(10.0, 8), 17.5);  // 2·7/8
  EXPECT_DOUBLE_EQ(bus_bandwidth(10.0, 2), 10.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth(10.0, 1), 0.0);
}

// Ring links of `world` ranks, all `base` seconds, except those out of `slow_sender` (+extra).
std::vector<LinkTime> ring(int world, double base, int slow_sender = -1, double extra = 0) {
  std::vector<LinkTime> links;
  for (int r = 0; r < world; ++r)
    for (int from : {(r - 1 + world) % world, (r + 1) % world})
      links.push_back({from, r, base + (from == slow_sender ? extra : 0)});
  return links;
}

TEST(DoctorPreflight, SlowRankIsNamedWhenEveryLinkOutOfItIsSlow) {
  SlowSpot s = find_slow_spot(ring(6, 0.002, 4, 0.050), 6);
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.rank, 4);
  EXPECT_EQ(s.src, 4);
  EXPECT_NEAR(s.typical, 0.002, 1e-12);
  s = find_slow_spot(ring(3, 0.002, 1, 0.3), 3);  // the smallest job where a majority exists
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.rank, 1);
}

TEST(DoctorPreflight, SlowNodeIsNamedWhenNoSingleRankExplainsIt) {
  // 3 nodes of 3 ranks; node 1's network is slow: the 4 ring links between nodes that touch it.
  std::vector<LinkTime> links = ring(9, 0.002);
  const std::vector<int> node_of = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  for (LinkTime& l : links)
    if (node_of[l.src] != node_of[l.dst] && (node_of[l.src] == 1 || node_of[l.dst] == 1)) l.seconds = 0.03;
  SlowSpot s = find_slow_spot(links, 9, node_of);
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.rank, -1);
  EXPECT_EQ(s.node, 1);
  EXPECT_EQ(find_slow_spot(links, 9).node, -1);  // without the mapping: links only
  std::vector<RankFacts> ranks = cpu_job(9, 3);
  Preflight pf;
  pf.ran = true;
  pf.ranks = 9;
  pf.links = links;
  expect_one_problem(analyse(default_config(), LaunchFacts{}, ranks, pf),
                     {"slowest: node 1 (node1)", "--exclude=node1"});
}

TEST(DoctorPreflight, OneSlowLinkIsNamedAsALink) {
  std::vector<LinkTime> links = ring(5, 0.002);
  links[3].seconds = 0.040;
  SlowSpot s = find_slow_spot(links, 5);
  ASSERT_TRUE(s.found);
  EXPECT_EQ(s.rank, -1);
  EXPECT_EQ(s.src, links[3].src);
  EXPECT_EQ(s.dst, links[3].dst);
}

TEST(DoctorPreflight, NoOutlierInUniformNoiseOrTwoRanksOrSubMillisecondJitter) {
  std::vector<LinkTime> links = ring(8, 0.002);
  for (size_t i = 0; i < links.size(); ++i) links[i].seconds *= 1.0 + 0.3 * double(i % 3);  // ±30 %: normal
  EXPECT_FALSE(find_slow_spot(links, 8).found);
  EXPECT_FALSE(find_slow_spot(ring(2, 0.002, 1, 1.0), 2).found);      // no majority with two ranks
  EXPECT_FALSE(find_slow_spot(ring(4, 0.0001, 2, 0.0005), 4).found);  // 6× but only 0.5 ms: noise
}

// ---- analysis rules ------------------------------------------------------------

TEST(DoctorAnalysis, HealthyCpuJobHasNoFindings) {
  std::vector<Finding> f = analyse_ranks(cpu_job(4));
  EXPECT_TRUE(f.empty()) << f.front().text;
}

TEST(DoctorAnalysis, TwoRanksOnOneGpuIsAProblemWithTheSlurmFix) {
  std::vector<RankFacts> ranks = cpu_job(4, 4);
  for (int r = 0; r < 4; ++r) give_gpu(ranks[r], r, "0000:0" + std::to_string(r) + ":00.0");
  EXPECT_TRUE(texts(analyse_ranks(ranks), Severity::Problem).empty());
  give_gpu(ranks[2], 0, "0000:00:00.0");  // rank 2 lands on rank 0's GPU
  expect_one_problem(analyse_ranks(ranks), {"2 ranks share GPU 0", "node0", "ranks 0,2", "--gpus-per-task=1",
                                            "--ntasks-per-node=4"});
}

TEST(DoctorAnalysis, GpusByCudaVisibleDevicesAreNotShared) {
  // srun --gpus-per-task=1: every rank sees one GPU as index 0, but each a different one.
  std::vector<RankFacts> ranks = cpu_job(2, 2);
  give_gpu(ranks[0], 0, "0000:01:00.0", 1);
  give_gpu(ranks[1], 0, "0000:02:00.0", 1);
  EXPECT_TRUE(texts(analyse_ranks(ranks), Severity::Problem).empty());
}

TEST(DoctorAnalysis, NodeWithoutGpusInAGpuJob) {
  std::vector<RankFacts> ranks = cpu_job(4, 2);
  give_gpu(ranks[0], 0, "0000:01:00.0", 2);
  give_gpu(ranks[1], 1, "0000:02:00.0", 2);
  for (RankFacts& r : ranks) r.versions.cuda_built = true;
  expect_one_problem(analyse_ranks(ranks), {"no GPU is visible on node1", "ranks 2,3", "--gpus-per-task=1"});
  Config cfg;
  cfg.train.device = DeviceChoice::Cuda;
  std::vector<RankFacts> cpu_only = cpu_job(2, 2);
  for (RankFacts& r : cpu_only) r.versions.cuda_built = true;
  expect_one_problem(analyse_ranks(cpu_only, cfg), {"--train.device cuda", "--nv"});
}

TEST(DoctorAnalysis, LaunchProblems) {
  LaunchFacts launch;
  launch.pmi_problem = "srun started 4 tasks but MPI sees a world of 1 (PMI mismatch): use srun --mpi=pmix";
  expect_one_problem(analyse(default_config(), launch, cpu_job(1), Preflight{}),
                     {"PMI mismatch", "--mpi=pmix"});

  launch = LaunchFacts{};
  launch.world = 4;
  launch.slurm_step_tasks = 8;
  expect_one_problem(analyse(default_config(), launch, cpu_job(4), Preflight{}), {"8 tasks", "world of 4"});

  std::vector<RankFacts> ranks = cpu_job(4, 2);
  for (RankFacts& r : ranks) r.host = "container";  // singularity --hostname on every node
  expect_one_problem(analyse_ranks(ranks), {"2 different nodes", "'container'", "--hostname"});
}

TEST(DoctorAnalysis, VersionMismatches) {
  std::vector<RankFacts> ranks = cpu_job(2, 1);
  ranks[1].versions.mpi_runtime = "Open MPI v5.0.3";  // rank 1's node has another module loaded
  ranks[1].versions.mpi_build = "Open MPI 4.1.4";
  std::vector<std::string> p = texts(analyse_ranks(ranks), Severity::Problem);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_NE(p[0].find("different MPI libraries"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("ABI"), std::string::npos) << p[1];

  ranks = cpu_job(1);
  ranks[0].versions.cuda_built = true;
  ranks[0].versions.cuda_runtime = "13.0";
  ranks[0].versions.cuda_driver = "12.4";
  expect_one_problem(analyse_ranks(ranks), {"CUDA driver", "12.4", "13.0"});
  ranks[0].versions.cuda_driver = "13.1";
  EXPECT_TRUE(analyse_ranks(ranks).empty());
}

TEST(DoctorAnalysis, NetworkSettingsThatMatchNothing) {
  std::vector<RankFacts> ranks = cpu_job(2, 1);
  ranks[1].env = ranks[0].env = {{"NCCL_SOCKET_IFNAME", "enp65s0"}};
  std::vector<std::string> p = texts(analyse_ranks(ranks), Severity::Problem);
  ASSERT_EQ(p.size(), 2u);  // one per node: each has its own interfaces
  EXPECT_NE(p[0].find("NCCL_SOCKET_IFNAME=enp65s0 matches no network interface on node0"), std::string::npos)
      << p[0];

  ranks = cpu_job(2, 1);
  ranks[1].env = ranks[0].env = {{"NCCL_IB_HCA", "mlx5_3"}};
  p = texts(analyse_ranks(ranks), Severity::Problem);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_NE(p[0].find("mlx5_3"), std::string::npos) << p[0];

  ranks = cpu_job(2, 1);
  ranks[1].ib[0].state = "DOWN";
  expect_one_problem(analyse_ranks(ranks), {"no InfiniBand port is ACTIVE on node1", "mlx5_0 port 1 DOWN"});
}

TEST(DoctorAnalysis, DifferentEnvironmentOnOneRankIsAWarning) {
  std::vector<RankFacts> ranks = cpu_job(4);
  ranks[3].env = {{"NCCL_IB_HCA", "mlx5_0"}};
  ranks[2].env = {{"CUDA_VISIBLE_DEVICES", "2"}};  // differs by design: not reported
  std::vector<Finding> f = analyse_ranks(ranks);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::Warning);
  EXPECT_NE(f[0].text.find("rank 3 on node1"), std::string::npos) << f[0].text;
  EXPECT_NE(f[0].text.find("NCCL_IB_HCA 'mlx5_0' vs unset"), std::string::npos) << f[0].text;
}

TEST(DoctorAnalysis, DataMissingOnEveryNodeIsOneLine) {
  std::vector<RankFacts> ranks = cpu_job(4, 2);
  for (int r : {0, 2}) {  // local rank 0 of each node checks
    ranks[r].data.checked = true;
    ranks[r].data.error = "data file '/scratch/x.h5': no such file";
  }
  expect_one_problem(analyse_ranks(ranks), {"no such file", "(on every node)", "--bind"});
  ranks[0].data = {};
  ranks[0].data.checked = ranks[0].data.opens = true;
  expect_one_problem(analyse_ranks(ranks), {"no such file", "(on node1)"});
}

TEST(DoctorAnalysis, RunDirProblems) {
  std::vector<RankFacts> ranks = cpu_job(2);
  ranks[0].run_dir = {true, "/ro/run", "/ro", true, false, "Read-only file system", 5ull << 30, "nfs"};
  expect_one_problem(analyse_ranks(ranks),
                     {"'/ro/run' is not writable", "Read-only file system", "--run.dir"});
  ranks[0].run_dir = {true, "/full/run", "/full", true, true, "", 100ull << 20, "lustre"};
  expect_one_problem(analyse_ranks(ranks), {"only 100.0 MiB free", "--run.dir"});
}

TEST(DoctorAnalysis, PreflightFindings) {
  std::vector<RankFacts> ranks = cpu_job(4, 2);
  Preflight pf;
  pf.ran = true;
  pf.ranks = 4;
  pf.ring_bytes = 1 << 20;
  pf.links = ring(4, 0.001, 3, 0.2);
  expect_one_problem(analyse(default_config(), LaunchFacts{}, ranks, pf),
                     {"slowest: rank 3 on node1", "--exclude=node1"});
  pf.links = ring(4, 0.001);
  pf.sweeps = {{"mpi", "host", {{4096, 1024, 10, 0.4, 0.6, 0}}, {}},
               {"nccl", "gpu", {{4096, 1024, 10, 0.4, 0.6, 17}}, {}}};
  expect_one_problem(analyse(default_config(), LaunchFacts{}, ranks, pf),
                     {"AllReduce (nccl)", "17 wrong elements", "NCCL"});
}

TEST(DoctorAnalysis, RankListCollapsesRuns) {
  EXPECT_EQ(rank_list({5, 0, 1, 2, 3, 7, 8}), "0-3,5,7,8");
  EXPECT_EQ(rank_list({4}), "4");
  EXPECT_EQ(rank_list({}), "");
}

// ---- command line and output -------------------------------------------------------

std::vector<std::string> rewritten(std::vector<const char*> argv) {
  Args a(static_cast<int>(argv.size()), argv.data());
  return std::vector<std::string>(a.argv(), a.argv() + a.argc());
}

TEST(DoctorArgs, BareSwitchesGetAValueOnlyForDoctor) {
  using V = std::vector<std::string>;
  EXPECT_EQ(rewritten({"hpctrain", "doctor", "--json"}), (V{"hpctrain", "doctor", "--json=true"}));
  EXPECT_EQ(rewritten({"hpctrain", "doctor", "--local", "--json", "--run.dir", "x"}),
            (V{"hpctrain", "doctor", "--local=true", "--json=true", "--run.dir", "x"}));
  EXPECT_EQ(rewritten({"hpctrain", "doctor", "--json", "false"}),
            (V{"hpctrain", "doctor", "--json", "false"}));
  EXPECT_EQ(rewritten({"hpctrain", "--json"}),
            (V{"hpctrain", "--json"}));  // not doctor: left to parse_config
}

TEST(DoctorReport, JsonAndTextCarryTheSameFacts) {
  Report r;
  r.launch.world = 2;
  r.ranks = cpu_job(2);
  r.ranks[0].env = {{"NCCL_DEBUG", "INFO"}};
  r.ranks[0].run_dir = {true, "runs/x", ".", false, true, "", 9ull << 30, "ext4"};
  r.preflight.ran = true;
  r.preflight.ranks = 2;
  r.preflight.sweeps = {{"mpi", "host", {{4096, 1024, 12.5, 0.33, 0.33, 0}}, {12.5, 12.0}}};
  r.preflight.links = ring(2, 0.001);
  r.findings = {{Severity::Problem, "quote \" and backslash \\ survive"}, {Severity::Warning, "w"}};
  std::string json = render_json(r);
  EXPECT_EQ(json.rfind("{\"ok\":false,\"problems\":[\"quote \\\" and backslash \\\\ survive\"]", 0), 0u)
      << json;
  for (const char* key :
       {"\"launch\":", "\"versions\":", "\"ranks\":[{\"rank\":0", "\"nodes\":",
        "\"environment\":{\"NCCL_DEBUG\":\"INFO\"}", "\"data\":null", "\"run_dir\":", "\"preflight\":",
        "\"sweeps\":[{\"communicator\":\"mpi\",\"buffers\":\"host\",\"rows\":[{\"bytes\":4096",
        "\"slowest\":null"})
    EXPECT_NE(json.find(key), std::string::npos) << key << " missing in " << json;
  for (const char* bad : {",}", ",]", "{,", "[,", "::"}) EXPECT_EQ(json.find(bad), std::string::npos) << bad;
  std::string text = render_text(r);
  for (const char* line :
       {"problem: quote", "warning: w", "busbw(GB/s)", "NCCL_DEBUG=INFO", "1 problem(s) need fixing"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing in\n" << text;
}

// ---- fabric: InfiniBand present but unused --------------------------------------------

TEST(DoctorProbes, NumaNodesOfHcaAndGpuFromPlantedSysfs) {
  TempDir ib, pci;
  ib.write("mlx5_0/ports/1/state", "4: ACTIVE\n");
  ib.write("mlx5_0/device/numa_node", "1\n");
  ib.write("mlx5_1/ports/1/state", "4: ACTIVE\n");  // no numa_node: -1
  std::vector<IbPort> ports = scan_infiniband(ib.path());
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].numa_node, 1);
  EXPECT_EQ(ports[1].numa_node, -1);
  pci.write("0000:17:00.0/numa_node", "0\n");
  EXPECT_EQ(gpu_numa_node("00000000:17:00.0", pci.path()), 0);  // CUDA's 8-digit domain, sysfs's 4
  EXPECT_EQ(gpu_numa_node("0000:17:00.0", pci.path()), 0);
  EXPECT_EQ(gpu_numa_node("00000000:18:00.0", pci.path()), -1);
  EXPECT_TRUE(library_loads("libc.so.6"));
  EXPECT_FALSE(library_loads("libhpctrain-no-such-library.so.1"));
}

TEST(DoctorAnalysis, InfiniBandPresentButUnusedIsOneLineWithTheFix) {
  {  // NCCL_IB_DISABLE=1 on an IB node
    std::vector<RankFacts> ranks = cpu_job(4);
    for (RankFacts& f : ranks) f.env = {{"NCCL_IB_DISABLE", "1"}};
    std::vector<std::string> w = texts(analyse_ranks(ranks), Severity::Warning);
    ASSERT_FALSE(w.empty());
    EXPECT_NE(w[0].find("NCCL_IB_DISABLE=1 on node0 although it has InfiniBand (mlx5_0)"), std::string::npos)
        << w[0];
    EXPECT_NE(w[0].find("unset it"), std::string::npos);
  }
  {  // libibverbs missing in the container
    std::vector<RankFacts> ranks = cpu_job(4);
    for (RankFacts& f : ranks) f.ibverbs = false;
    ranks[2].ibverbs = ranks[3].ibverbs = true;  // only node0's container lacks it
    expect_one_problem(analyse_ranks(ranks),
                       {"libibverbs.so.1 does not load on node0 although it has InfiniBand (mlx5_0)",
                        "fall back to TCP", "install rdma-core/libibverbs1 in the container"});
  }
  {  // NCCL_SOCKET_IFNAME naming no interface
    std::vector<RankFacts> ranks = cpu_job(2, 2);
    for (RankFacts& f : ranks) f.env = {{"NCCL_SOCKET_IFNAME", "ib7"}};
    expect_one_problem(analyse_ranks(ranks), {"NCCL_SOCKET_IFNAME=ib7 matches no network interface on node0",
                                              "eth0, ib0, lo", "set it to one of those"});
  }
  {  // Open MPI's pml forced to ob1 (TCP) on IB nodes: CPU training sends its gradients over it
    std::vector<RankFacts> ranks = cpu_job(4);
    for (RankFacts& f : ranks) f.env = {{"OMPI_MCA_pml", "ob1"}};
    std::vector<std::string> p = texts(analyse_ranks(ranks), Severity::Problem);
    ASSERT_EQ(p.size(), 2u);  // one per node
    EXPECT_NE(
        p[0].find("OMPI_MCA_pml=ob1 on node0, which has InfiniBand (mlx5_0): Open MPI sends the gradients "
                  "over TCP; use OMPI_MCA_pml=ucx"),
        std::string::npos)
        << p[0];
    // One node: no traffic between nodes, nothing to say.
    std::vector<RankFacts> one = cpu_job(2, 2);
    for (RankFacts& f : one) f.env = {{"OMPI_MCA_pml", "ob1"}};
    EXPECT_TRUE(texts(analyse_ranks(one), Severity::Problem).empty());
  }
}
}  // namespace
}  // namespace hpc::doctor
