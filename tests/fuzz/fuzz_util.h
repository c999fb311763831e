// Shared pieces of the fuzz targets (tests/fuzz/fuzz_*.cpp).
//
// The contract every target checks: whatever the input, the code under test
// either succeeds or throws hpc::UserError (one line, exit 2). Anything else
// is a finding and aborts the process, which libFuzzer reports as a crash
// and the replay main (replay_main.cpp) as a failed test: another exception
// type (an hpc::Error with exit 1 is an internal invariant that failed; a
// std::out_of_range is an unchecked index), a sanitizer report, a timeout.
//
// ByteReader turns the fuzz bytes into structured choices (the structure-
// aware targets build HDF5 files from them); it never fails: past the end
// it returns zeros, so every input decodes to something.
//
// ScratchDir is a per-process directory on tmpfs (/dev/shm when there) for
// the parsers that take a path; files are rewritten in place every input.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <typeinfo>

#include "core/error.h"

namespace hpc::fuzz {

// A finding: print what happened and abort (libFuzzer saves the input).
[[noreturn]] inline void finding(const char* target, const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING in %s: %s\n", target, what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs fn; a UserError is the clean outcome for bad input, anything else a finding.
template <class Fn>
void expect_clean(const char* target, Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    // The documented answer to bad input. FUZZ_VERBOSE=1 shows it (which check a regression input hits).
    if (std::getenv("FUZZ_VERBOSE")) std::fprintf(stderr, "%s: UserError: %s\n", target, e.what());
  } catch (const Error& e) {
    finding(target, "hpc::Error with exit code " + std::to_string(e.exit_code()) + ": " + e.what());
  } catch (const std::exception& e) {
    finding(target, std::string("uncaught ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    finding(target, "uncaught exception of unknown type");
  }
}

// A property of a successful parse that does not hold.
inline void require(bool ok, const char* target, const std::string& what) {
  if (!ok) finding(target, what);
}

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}

  bool empty() const { return at_ >= n_; }
  size_t left() const { return at_ < n_ ? n_ - at_ : 0; }
  uint8_t u8() { return at_ < n_ ? p_[at_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return u16() | static_cast<uint32_t>(u16()) << 16; }
  uint64_t u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }
  bool flag() { return u8() & 1; }
  // A value in [0, n) (n > 0).
  uint32_t below(uint32_t n) { return u8() % n; }
  // Mostly small numbers, sometimes the extremes that break arithmetic.
  int64_t interesting_int() {
    switch (u8() % 8) {
      case 0:
        return -static_cast<int64_t>(u8());
      case 1:
        return INT64_MAX - u8();
      case 2:
        return INT64_MIN + u8();
      case 3:
        return static_cast<int64_t>(u32());
      case 4:
        return static_cast<int64_t>(u64());
      default:
        return u8();
    }
  }
  double interesting_double() {
    switch (u8() % 10) {
      case 0:
        return std::numeric_limits<double>::quiet_NaN();
      case 1:
        return std::numeric_limits<double>::infinity();
      case 2:
        return -std::numeric_limits<double>::infinity();
      case 3:
        return 1e300;
      case 4:
        return -1e300;
      case 5: {
        double d;
        const uint64_t bits = u64();
        std::memcpy(&d, &bits, sizeof d);
        return d;
      }
      case 6:
        return 0.0;
      default:
        return (static_cast<int>(u8()) - 128) / 16.0;
    }
  }
  // Up to max_len bytes as a string.
  std::string str(size_t max_len) {
    const size_t len = std::min<size_t>(u8() % (max_len + 1), left());
    std::string s(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return s;
  }
  // Everything that is left.
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(p_ + std::min(at_, n_)), left());
    at_ = n_;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_, at_ = 0;
};

// Splits input at its first occurrence of `sep`: (before, after); no sep: (all, "").
inline std::pair<std::string, std::string> split_once(const std::string& s, const std::string& sep) {
  const size_t at = s.find(sep);
  if (at == std::string::npos) return {s, ""};
  return {s.substr(0, at), s.substr(at + sep.size())};
}

class ScratchDir {
 public:
  ScratchDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir_ = (base / ("hpctrain-fuzz-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return dir_; }
  // Writes `bytes` to DIR/name and returns the path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::string p = dir_ + "/" + name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) finding("ScratchDir", "cannot write " + p);
    return p;
  }

 private:
  std::string dir_;
};

// One ScratchDir per process, removed at exit (a function-local static, not a mutable global).
inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

// Sends stdout (summary lines of hpcdata pack, --help) to /dev/null once: fast and quiet.
inline void quiet_stdout() {
  static const bool done = [] { return std::freopen("/dev/null", "w", stdout) != nullptr; }();
  (void)done;
}

}  // namespace hpc::fuzz
