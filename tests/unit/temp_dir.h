// TempDir: a fresh directory under $TMPDIR for one test, removed with everything
// in it when the test ends (also when it fails). Shared by the unit tests that
// write files, so each does not carry its own copy; mkdtemp failing (full or
// read-only /tmp) is an exception naming the template, never a null path.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace hpc::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "hpctrain-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace hpc::test
