// The start-up BLAS core check (see blas_core.h for why it re-executes).
//
// State between the processes of one start travels in one variable,
// HPCTRAIN_BLAS_CORE_FIX, removed again as soon as it is read:
//   "FROM>TO"        this process was re-executed with OPENBLAS_CORETYPE=TO
//                    because OpenBLAS had chosen FROM
//   "FROM>TO!ERROR"  TO failed the self-check (ERROR); this process runs
//                    FROM again (OPENBLAS_CORETYPE=FROM)
// So there are at most two re-executions, both before MPI_Init, and never a loop.
#include "backend/cpu/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/fault.h"

namespace hpc::backend::cpu {

namespace {

constexpr const char* MARK = "HPCTRAIN_BLAS_CORE_FIX";
constexpr const char* CORETYPE = "OPENBLAS_CORETYPE";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string class_tag(SpeedClass c) { return std::string("[") + speed_class_name(c) + "]"; }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// Deterministic values in [-1, 1): the check must not depend on anything but the core.
void fill_values(std::vector<float>& v, uint64_t seed) {
  for (float& x : v) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>(static_cast<double>(seed >> 40) / double(1 << 23) - 1.0);
  }
}

struct Shape {
  int m, n, k;
  bool ta, tb;
};

// One row-major C = op(A)·op(B) against the float64 reference; returns error / tolerance.
double check_one(const Shape& s, bool corrupt, double& error) {
  std::vector<float> a(size_t(s.m) * s.k), b(size_t(s.k) * s.n), c(size_t(s.m) * s.n, 0.f);
  fill_values(a, 11u + s.m);
  fill_values(b, 17u + s.n);
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n,
              s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
  if (corrupt) c[c.size() / 2] += 0.5f;
  double worst = 0, magnitude = 0;
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      double dot = 0, mag = 0;
      for (int p = 0; p < s.k; ++p) {
        const double x = s.ta ? a[size_t(p) * lda + i] : a[size_t(i) * lda + p];
        const double y = s.tb ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j];
        dot += x * y;
        mag += std::fabs(x * y);
      }
      const double d = std::fabs(double(c[size_t(i) * s.n + j]) - dot);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      magnitude = std::max(magnitude, mag);
    }
  const double e = magnitude > 0 ? worst / magnitude : worst;
  error = std::max(error, e);
  return e / (double(s.k) * FLT_EPSILON);  // float rounding bound of a K-term dot product
}

[[noreturn]] void reexec(char** argv, const std::string& mark, const std::string& core) {
  setenv(MARK, mark.c_str(), 1);
  setenv(CORETYPE, core.c_str(), 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  // Running on with a core known to be wrong is not an option: one line, exit 1.
  std::fprintf(stderr, "hpctrain: error: could not re-execute with %s=%s: %s\n", CORETYPE, core.c_str(),
               std::strerror(errno));
  std::_Exit(EXIT_INTERNAL);
}

BlasCore& result() {
  static BlasCore r;  // written once by fit_blas_core, before any thread; read-only afterwards
  return r;
}
bool fitted = false;

}  // namespace

const char* speed_class_name(SpeedClass c) {
  switch (c) {
    case SpeedClass::Sse:
      return "SSE";
    case SpeedClass::Avx:
      return "AVX";
    case SpeedClass::Avx2:
      return "AVX2";
    case SpeedClass::Avx512:
      return "AVX-512";
    case SpeedClass::Unknown:
      break;
  }
  return "unknown";
}

SpeedClass CpuIsa::best() const {
  if (avx512f && avx512bw && avx512vl && avx2 && fma) return SpeedClass::Avx512;
  if (avx2 && fma) return SpeedClass::Avx2;
  if (avx) return SpeedClass::Avx;
  return SpeedClass::Sse;
}

std::string CpuIsa::text() const {
  std::string s;
  auto add = [&](bool have, const char* name) {
    if (have) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx, "AVX");
  add(avx2, "AVX2");
  add(fma, "FMA");
  if (avx512f) {
    s += (s.empty() ? "" : " ") + std::string("AVX-512F");
    if (avx512bw) s += "/BW";
    if (avx512vl) s += "/VL";
  }
  return s.empty() ? "SSE only" : s;
}

CpuIsa cpu_isa() {
  CpuIsa c;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's CPUID reading also checks XGETBV: a feature the OS does not save counts as absent.
  __builtin_cpu_init();
  c.avx = __builtin_cpu_supports("avx");
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
#endif
  return c;
}

SpeedClass core_class(const std::string& core) {
  struct Entry {
    const char* name;
    SpeedClass cls;
  };
  // OpenBLAS 0.3.x's x86-64 DYNAMIC_ARCH cores (driver/others/dynamic.c), by the kernels they use.
  static constexpr Entry TABLE[] = {{"skylakex", SpeedClass::Avx512},
                                    {"cooperlake", SpeedClass::Avx512},
                                    {"sapphirerapids", SpeedClass::Avx512},
                                    {"haswell", SpeedClass::Avx2},
                                    {"zen", SpeedClass::Avx2},
                                    {"sandybridge", SpeedClass::Avx},
                                    {"bulldozer", SpeedClass::Avx},
                                    {"piledriver", SpeedClass::Avx},
                                    {"steamroller", SpeedClass::Avx},
                                    {"excavator", SpeedClass::Avx},
                                    {"prescott", SpeedClass::Sse},
                                    {"core2", SpeedClass::Sse},
                                    {"penryn", SpeedClass::Sse},
                                    {"dunnington", SpeedClass::Sse},
                                    {"nehalem", SpeedClass::Sse},
                                    {"atom", SpeedClass::Sse},
                                    {"opteron", SpeedClass::Sse},
                                    {"opteron_sse3", SpeedClass::Sse},
                                    {"barcelona", SpeedClass::Sse},
                                    {"bobcat", SpeedClass::Sse},
                                    {"nano", SpeedClass::Sse},
                                    {"katmai", SpeedClass::Sse},
                                    {"coppermine", SpeedClass::Sse},
                                    {"northwood", SpeedClass::Sse},
                                    {"banias", SpeedClass::Sse},
                                    {"athlon", SpeedClass::Sse}};
  const std::string key = lower(core);
  for (const Entry& e : TABLE)
    if (key == e.name) return e.cls;
  return SpeedClass::Unknown;
}

const char* best_core_for(SpeedClass c) {
  switch (c) {
    case SpeedClass::Avx512:
      return "SkylakeX";  // Cooperlake adds only bf16 kernels: same sgemm
    case SpeedClass::Avx2:
      return "Haswell";
    case SpeedClass::Avx:
      return "Sandybridge";
    default:
      return "";
  }
}

SelfCheck sgemm_self_check(bool corrupt) {
  // Odd sizes reach the kernels' edge code; the last is large enough for the blocked path.
  static constexpr Shape SHAPES[] = {{67, 45, 131, false, false},
                                     {33, 70, 129, true, false},
                                     {50, 37, 96, false, true},
                                     {160, 144, 256, false, false}};
  SelfCheck r;
  double worst = 0;
  bool first = true;
  for (const Shape& s : SHAPES) {
    worst = std::max(worst, check_one(s, corrupt && first, r.error));
    first = false;
  }
  r.ok = worst <= 1.0;
  return r;
}

std::string core_to_request(const std::string& running, bool user_set, bool dynamic_arch, const CpuIsa& cpu) {
  if (user_set || !dynamic_arch) return "";
  const SpeedClass have = core_class(running);
  if (have == SpeedClass::Unknown || have >= cpu.best()) return "";
  return best_core_for(cpu.best());
}

std::string BlasCore::line() const {
  return core + " " + class_tag(core_speed) + ": " + why + "; CPU " + cpu + " " + class_tag(cpu_speed) +
         "; sgemm self-check " + (check.ok ? "ok" : "FAILED") + " (max error " + number(check.error) + ")";
}

void fit_blas_core(char** argv) {
  if (fitted) return;
  fitted = true;
  BlasCore& r = result();
  const char* name = openblas_get_corename();
  r.core = name ? name : "unknown";
  r.core_speed = core_class(r.core);
  const CpuIsa isa = cpu_isa();
  r.cpu = isa.text();
  r.cpu_speed = isa.best();

  const std::string mark = std::getenv(MARK) ? std::getenv(MARK) : "";
  unsetenv(MARK);  // a program this one starts begins afresh
  const size_t arrow = mark.find('>');
  if (argv != nullptr && arrow != std::string::npos) {
    const std::string from = mark.substr(0, arrow);
    const size_t bang = mark.find('!', arrow);
    const std::string to =
        mark.substr(arrow + 1, bang == std::string::npos ? std::string::npos : bang - arrow - 1);
    const std::string from_text = "OpenBLAS chose " + from + " " + class_tag(core_class(from));
    if (bang != std::string::npos) {  // back on the library's choice after TO failed
      r.check = sgemm_self_check();
      r.why = from_text + "; " + to + " failed the sgemm self-check (max error " + mark.substr(bang + 1) +
              "), so the library's choice is kept";
      return;
    }
    if (lower(r.core) != lower(to)) {  // OPENBLAS_CORETYPE named a core this build lacks: it detected again
      r.check = sgemm_self_check();
      r.why = from_text + "; this OpenBLAS build has no " + to + " core";
      return;
    }
    r.check = sgemm_self_check(fault_planned(FaultKind::Wrong, FaultPoint::BlasCheck));
    if (!r.check.ok) reexec(argv, from + ">" + to + "!" + number(r.check.error), from);
    r.corrected = true;
    r.why = "corrected: " + from_text + ", re-executed with " + std::string(CORETYPE) + "=" + to;
    return;
  }

  const char* env = std::getenv(CORETYPE);
  const bool user_set = env && *env && !fault_planned(FaultKind::Lesser, FaultPoint::BlasCore);
  const char* config = openblas_get_config();
  const bool dynamic_arch = config && std::strstr(config, "DYNAMIC_ARCH");
  const std::string want = core_to_request(r.core, user_set, dynamic_arch, isa);
  if (!want.empty() && argv != nullptr) reexec(argv, r.core + ">" + want, want);

  r.check = sgemm_self_check();
  const bool lesser = r.core_speed != SpeedClass::Unknown && r.core_speed < r.cpu_speed;
  if (user_set)
    r.why = "set by the user (" + std::string(CORETYPE) + "=" + env + ")" +
            (lesser && *best_core_for(r.cpu_speed)
                 ? "; the CPU could run " + std::string(best_core_for(r.cpu_speed))
                 : "");
  else if (!dynamic_arch)
    r.why = "fixed by this OpenBLAS build (not DYNAMIC_ARCH)";
  else if (lesser && argv == nullptr)
    r.why = "OpenBLAS's choice; lesser than the CPU's, not corrected (fit_blas_core was not called)";
  else
    r.why = lesser || r.core_speed == SpeedClass::Unknown ? "OpenBLAS's choice; no better core known"
                                                          : "OpenBLAS's choice, fits the CPU";
  if (!r.check.ok && launcher_rank() <= 0)
    std::fprintf(stderr, "hpctrain: warning: the BLAS core %s fails the sgemm self-check (max error %s)\n",
                 r.core.c_str(), number(r.check.error).c_str());
}

const BlasCore& blas_core() {
  if (!fitted) fit_blas_core(nullptr);
  return result();
}

}  // namespace hpc::backend::cpu
