// A main() for the fuzz targets without libFuzzer: replays files.
//
//   fuzz_replay_NAME PATH...     each PATH a file, or a directory whose files are replayed
//
// `make test` builds every tests/fuzz/fuzz_NAME.cpp with this main under the
// project's own compiler (tests/e2e/fuzz_regress.sh runs them over the seed
// corpora and the regression inputs), so the regressions stay checked without
// clang. A finding aborts inside the target; this prints the file first so
// the failing input is named.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path().string());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 1;
    }
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
    std::fprintf(stderr, "replay %s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  // stderr: targets that print send stdout to /dev/null (fuzz::quiet_stdout).
  std::fprintf(stderr, "replayed %zu input(s)\n", files.size());
  return 0;
}
