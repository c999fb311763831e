// Run-directory checkpoint bookkeeping (see store.h).
#include "ckpt/store.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/error.h"

namespace hpc::ckpt {

namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[48];
  std::snprintf(name, sizeof name, "ckpt-%08lld.h5", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::vector<StoredCheckpoint> list_checkpoints(const std::string& dir) {
  static const std::regex NAME(R"(ckpt-([0-9]{1,18})\.h5)");
  std::vector<StoredCheckpoint> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    std::error_code type_ec;  // an entry whose type cannot be read is skipped, not the rest
    if (std::regex_match(name, m, NAME) && it->is_regular_file(type_ec))
      out.push_back({std::stoll(m[1].str()), it->path().string()});
  }
  std::sort(out.begin(), out.end(), [](const StoredCheckpoint& a, const StoredCheckpoint& b) {
    return a.step != b.step ? a.step > b.step : a.path > b.path;
  });
  return out;
}

Found find_newest_valid(const std::string& dir, FlatData flat) {
  Found found;
  for (const StoredCheckpoint& s : list_checkpoints(dir)) {
    try {
      found.checkpoint = read_checkpoint(s.path, flat);
      found.path = s.path;
      return found;
    } catch (const UserError& e) {
      found.skipped.emplace_back(e.what());
    }
  }
  return found;
}

std::vector<std::string> prune(const std::string& dir, int64_t written_step, int keep) {
  std::vector<std::string> log;
  std::error_code ec;
  int kept = 0;
  for (const StoredCheckpoint& s : list_checkpoints(dir)) {
    if (s.step > written_step) {
      fs::rename(s.path, s.path + ".stale", ec);
      log.push_back(ec ? "cannot set aside " + s.path + " (" + ec.message() + ")"
                       : "set aside " + s.path + " as .stale: it is newer than this run (another timeline)");
    } else if (++kept > keep) {
      fs::remove(s.path, ec);
      if (ec) log.push_back("cannot remove old checkpoint " + s.path + " (" + ec.message() + ")");
    }
  }
  // Only this run's rank 0 writes here, one checkpoint at a time, and its own
  // temporary file is renamed by now: every other one is the remains of a
  // writer that was killed. Collected first: removing while iterating a
  // directory may skip entries.
  static const std::regex TEMP(R"(ckpt-[0-9]+\.h5\.tmp-[0-9]+)");
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), TEMP)) leftovers.push_back(it->path());
  for (const fs::path& p : leftovers) {
    std::error_code rm;
    fs::remove(p, rm);
    log.push_back(rm ? "cannot remove " + p.string() + " (" + rm.message() + ")"
                     : "removed " + p.string() + " (left by a writer that was killed)");
  }
  return log;
}

}  // namespace hpc::ckpt
