// Local probes (see probes.h).
#include "doctor/probes.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace hpc::doctor {

namespace fs = std::filesystem;

namespace {

std::string read_first_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep))
    if (!part.empty()) out.push_back(part);
  return out;
}

// One entry of an NCCL interface/HCA list: "=name" matches exactly, "name" as a prefix.
bool list_entry_matches(std::string entry, const std::string& name) {
  if (!entry.empty() && entry[0] == '=') return entry.substr(1) == name;
  return starts_with(name, entry);
}

}  // namespace

int read_numa_node(const fs::path& file) {
  try {
    return std::stoi(read_first_line(file));
  } catch (const std::exception&) {
    return -1;
  }
}

int gpu_numa_node(const std::string& pci_bus_id, const std::string& root) {
  // CUDA says "00000000:17:00.0", sysfs "0000:17:00.0" (4-digit domain), lower case.
  std::string id = pci_bus_id;
  const size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  return id.empty() ? -1 : read_numa_node(fs::path(root) / id / "numa_node");
}

bool library_loads(const char* name) {
  void* h = ::dlopen(name, RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  ::dlclose(h);
  return true;
}

std::vector<IbPort> scan_infiniband(const std::string& root) {
  std::vector<IbPort> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& dev : fs::directory_iterator(root, ec)) {
    const fs::path ports = dev.path() / "ports";
    if (!fs::is_directory(ports, ec)) continue;
    for (const auto& port : fs::directory_iterator(ports, ec)) {
      IbPort p;
      p.device = dev.path().filename().string();
      try {
        p.port = std::stoi(port.path().filename().string());
      } catch (const std::exception&) {
        continue;
      }
      // "4: ACTIVE" → "ACTIVE"
      std::string state = read_first_line(port.path() / "state");
      size_t colon = state.find(':');
      p.state = colon == std::string::npos ? state : state.substr(state.find_first_not_of(' ', colon + 1));
      p.rate = read_first_line(port.path() / "rate");
      p.link_layer = read_first_line(port.path() / "link_layer");
      p.numa_node = read_numa_node(dev.path() / "device" / "numa_node");
      out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end(), [](const IbPort& a, const IbPort& b) {
    return std::tie(a.device, a.port) < std::tie(b.device, b.port);
  });
  return out;
}

std::vector<std::string> network_interfaces() {
  std::vector<std::string> names;
  if (struct if_nameindex* list = if_nameindex()) {
    for (struct if_nameindex* i = list; i->if_index != 0 || i->if_name != nullptr; ++i)
      names.emplace_back(i->if_name);
    if_freenameindex(list);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int nvidia_gpus_present(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(root, ec)) n += entry.is_directory(ec) ? 1 : 0;
  return n;
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

std::vector<std::pair<std::string, std::string>> fabric_environment(char** environ_, int* hidden) {
  static const char* const PREFIXES[] = {"NCCL_", "UCX_", "OMPI_MCA_", "PMIX_MCA_", "FI_"};
  static const char* const SINGLES[] = {"HDF5_USE_FILE_LOCKING", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
                                        "OPENBLAS_NUM_THREADS"};
  // What mpirun (ORTE/PRRTE) puts into every rank's environment to wire the
  // job up: per-rank ids, URIs, session directories. Not tuning knobs.
  static const char* const LAUNCHER[] = {"OMPI_MCA_orte_",
                                         "OMPI_MCA_prte_",
                                         "OMPI_MCA_ess",
                                         "OMPI_MCA_pmix",
                                         "OMPI_MCA_initial_wdir",
                                         "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
                                         "OMPI_MCA_mpi_oversubscribe",
                                         "OMPI_MCA_ompi_",
                                         "PMIX_MCA_mca_base_component_show_load_errors"};
  std::vector<std::pair<std::string, std::string>> out;
  int skipped = 0;
  for (char** e = environ_; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    bool wanted =
        std::any_of(std::begin(PREFIXES), std::end(PREFIXES),
                    [&](const char* p) { return starts_with(name, p); }) ||
        std::any_of(std::begin(SINGLES), std::end(SINGLES), [&](const char* s) { return name == s; });
    if (!wanted) continue;
    if (std::any_of(std::begin(LAUNCHER), std::end(LAUNCHER),
                    [&](const char* p) { return starts_with(name, p); })) {
      ++skipped;
      continue;
    }
    out.emplace_back(name, kv.substr(eq + 1));
  }
  std::sort(out.begin(), out.end());
  if (hidden) *hidden = skipped;
  return out;
}

bool socket_ifname_matches(const std::string& spec, const std::vector<std::string>& interfaces) {
  bool exclude = !spec.empty() && spec[0] == '^';
  std::vector<std::string> entries = split(exclude ? spec.substr(1) : spec, ',');
  for (const std::string& name : interfaces) {
    bool listed = std::any_of(entries.begin(), entries.end(),
                              [&](const std::string& e) { return list_entry_matches(e, name); });
    if (listed != exclude) return true;
  }
  return false;
}

std::vector<std::string> missing_ib_hcas(const std::string& spec, const std::vector<IbPort>& ports) {
  std::vector<std::string> missing;
  if (spec.empty() || spec[0] == '^') return missing;
  for (const std::string& entry : split(spec, ',')) {
    std::string name = entry.substr(0, entry.find(':'));
    bool found = std::any_of(ports.begin(), ports.end(),
                             [&](const IbPort& p) { return list_entry_matches(name, p.device); });
    if (!found) missing.push_back(name[0] == '=' ? name.substr(1) : name);
  }
  return missing;
}

std::string filesystem_type(const std::string& path) {
  struct statfs st {};
  if (statfs(path.c_str(), &st) != 0) return "";
  static const std::map<unsigned long, const char*> NAMES = {
      {0xEF53, "ext4"},        {0x58465342, "xfs"},    {0x9123683E, "btrfs"}, {0x01021994, "tmpfs"},
      {0x6969, "nfs"},         {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},  {0x19830326, "beegfs"},
      {0x794C7630, "overlay"}, {0xFF534D42, "cifs"},   {0xFE534D42, "smb2"},  {0x00C36400, "ceph"},
      {0xAAD7AAEA, "panfs"},   {0x65735546, "fuse"},   {0x2FC12FC1, "zfs"},   {0x73717368, "squashfs"},
      {0x9FA0, "proc"},        {0x62656572, "sysfs"}};
  auto it = NAMES.find(static_cast<unsigned long>(st.f_type) & 0xFFFFFFFFul);
  if (it != NAMES.end()) return it->second;
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(st.f_type));
  return hex;
}

RunDirFacts check_run_dir(const std::string& path) {
  RunDirFacts r;
  r.checked = true;
  r.path = path;
  std::error_code ec;
  // The directory that must accept new files: run.dir itself, or the nearest
  // ancestor that exists (training creates the missing levels below it).
  fs::path dir = path.empty() ? fs::path(".") : fs::path(path);
  r.exists = fs::exists(dir, ec);
  while (!fs::exists(dir, ec)) {
    fs::path up = dir.parent_path();
    dir = up.empty() || up == dir ? fs::path(".") : up;
  }
  r.probed = dir.string();
  if (!fs::is_directory(dir, ec)) {
    r.error = "not a directory";
    return r;
  }
  struct statvfs sv {};
  if (statvfs(r.probed.c_str(), &sv) == 0) r.free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
  r.filesystem = filesystem_type(r.probed);

  std::string tmpl = (dir / ".hpctrain-doctor-XXXXXX").string();
  int fd = mkstemp(tmpl.data());
  if (fd < 0) {
    r.error = std::strerror(errno);
    return r;
  }
  // A real write and fsync: a full disk or an over-quota user fails here, not at open.
  char block[4096] = {};
  bool ok = write(fd, block, sizeof block) == static_cast<ssize_t>(sizeof block) && fsync(fd) == 0;
  int err = errno;
  close(fd);
  unlink(tmpl.c_str());
  r.writable = ok;
  if (!ok) r.error = std::strerror(err);
  return r;
}

std::string human_bytes(uint64_t bytes) {
  static const char* const UNITS[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, UNITS[u]);
  return buf;
}

}  // namespace hpc::doctor
