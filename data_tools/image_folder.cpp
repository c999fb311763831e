// hpcdata pack --from image-folder: options, the folder scan, and the
// pack from scan to summary (the decoding workers are in pack_images.cpp).
#include "image_folder.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "commands.h"
#include "core/error.h"
#include "pack_images.h"

namespace hpc::data_tools {

namespace fs = std::filesystem;

namespace {

constexpr int64_t DEFAULT_SIZE = 224;  // the jpeg store's decode side when --size is not given
constexpr int DEFAULT_QUALITY = 90;    // re-encoding with --max-side alone

bool image_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

int64_t parse_positive(const std::string& name, const std::string& v, int64_t max) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || n < 1 || n > max)
    throw UserError(name + " expects an integer in [1, " + std::to_string(max) + "], got '" + v + "'");
  return n;
}

std::string mib(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / 1048576.0);
  return s;
}

}  // namespace

bool is_image_option(const std::string& name) {
  return name == "--store" || name == "--size" || name == "--max-side" || name == "--quality" ||
         name == "--on-error";
}

void set_image_option(const std::string& name, const std::string& value, ImageFolderOptions& o) {
  if (name == "--store") {
    if (value != "jpeg" && value != "raw")
      throw UserError("--store expects jpeg or raw, got '" + value + "'");
    o.store = value;
  } else if (name == "--size") {
    const size_t x = value.find('x');
    o.height = parse_positive("--size", value.substr(0, x), 16384);
    o.width = x == std::string::npos ? o.height : parse_positive("--size", value.substr(x + 1), 16384);
  } else if (name == "--max-side") {
    o.max_side = parse_positive("--max-side", value, 16384);
  } else if (name == "--quality") {
    o.quality = static_cast<int>(parse_positive("--quality", value, 100));
  } else if (name == "--threads") {
    o.threads = static_cast<int>(parse_positive("--threads", value, 1024));
  } else if (name == "--on-error") {
    if (value != "skip" && value != "fail")
      throw UserError("--on-error expects skip or fail, got '" + value + "'");
    o.skip_errors = value == "skip";
  }
}

ImageFolder scan_image_folder(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw UserError("image folder " + dir + ": no such directory");
  if (!fs::is_directory(dir, ec)) throw UserError("image folder " + dir + ": not a directory");
  ImageFolder f;
  std::vector<fs::path> class_dirs;
  fs::directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  if (ec) throw UserError("image folder " + dir + ": cannot list it (" + ec.message() + ")");
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // .ipynb_checkpoints, .DS_Store, …
    if (e.is_directory(ec))
      class_dirs.push_back(e.path());
    else
      ++f.ignored;
  }
  if (class_dirs.empty())
    throw UserError("image folder " + dir + " has no class folders (the layout is DIR/CLASS/IMAGE.jpg)");
  std::sort(class_dirs.begin(), class_dirs.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  for (const fs::path& c : class_dirs) {
    const auto label = static_cast<int32_t>(f.classes.size());
    f.classes.push_back(c.filename().string());
    // torchvision's order: sorted(os.walk(...)) then sorted file names, i.e. by (folder path, name).
    std::vector<std::pair<std::string, std::string>> found;
    fs::recursive_directory_iterator walk(c, fs::directory_options::follow_directory_symlink, ec);
    if (ec) throw UserError("class folder " + c.string() + ": cannot list it (" + ec.message() + ")");
    for (const fs::directory_entry& e : walk) {
      if (e.is_directory(ec)) continue;
      if (!image_extension(e.path())) {
        ++f.ignored;
        continue;
      }
      found.emplace_back(e.path().parent_path().string(), e.path().filename().string());
    }
    if (found.empty())
      throw UserError("class folder " + c.string() + " has no images (.jpg, .jpeg or .png files)");
    std::sort(found.begin(), found.end());
    for (const auto& [folder, name] : found) {
      const std::string path = (fs::path(folder) / name).string();
      f.files.push_back({path, label});
      f.bytes += static_cast<int64_t>(fs::file_size(path, ec));
    }
  }
  return f;
}

void pack_image_folder(DatasetWriter& w, const PackOptions& opt) {
  const ImageFolderOptions& o = opt.images;
  if (opt.inputs.size() != 1) throw UserError("pack --from image-folder takes one folder (DIR/CLASS/*.jpg)");
  if (opt.val_inputs.size() > 1) throw UserError("pack --from image-folder: --val takes one folder");
  if (opt.mean || opt.std || opt.scale)
    throw UserError(
        "pack --from image-folder computes per-channel mean and std of the training images; "
        "--scale, --mean and --std do not apply");
  if (o.store == "raw" && o.reencode())
    throw UserError("--max-side and --quality re-encode JPEG storage; with --store raw give --size");
  if (o.store == "jpeg" && o.height != o.width)
    throw UserError("--size for --store jpeg is one side (square samples, e.g. --size 224)");

  PackPlan plan;
  plan.store_raw = o.store == "raw";
  plan.height = o.height, plan.width = o.width;
  plan.max_side = o.max_side;
  plan.quality = o.reencode() ? (o.quality > 0 ? o.quality : DEFAULT_QUALITY) : 0;
  plan.skip_errors = o.skip_errors;
  plan.threads = o.threads;
  plan.spill_prefix = w.path() + ".spill";

  const ImageFolder train = scan_image_folder(opt.inputs[0]);
  std::vector<ImageFile> files = train.files;
  std::vector<char> is_val;
  int64_t folder_bytes = train.bytes;
  if (opt.val_fraction && *opt.val_fraction > 0)
    is_val = val_rows(static_cast<int64_t>(files.size()), *opt.val_fraction);
  if (!opt.val_inputs.empty()) {
    const ImageFolder val = scan_image_folder(opt.val_inputs[0]);
    std::map<std::string, int32_t> id;
    for (size_t i = 0; i < train.classes.size(); ++i) id[train.classes[i]] = static_cast<int32_t>(i);
    is_val.assign(files.size(), 0);
    for (const ImageFile& f : val.files) {
      const std::string& name = val.classes[static_cast<size_t>(f.label)];
      if (!id.count(name))
        throw UserError("validation folder " + opt.val_inputs[0] + ": class '" + name +
                        "' is not a class of " + opt.inputs[0]);
      files.push_back({f.path, id[name]});
      is_val.push_back(1);
    }
    folder_bytes += val.bytes;
  }

  const PackResult r = pack_images(files, is_val, plan);
  const int64_t side = o.height > 0 ? o.height : DEFAULT_SIZE;
  for (const PackedSplit* s : {&r.train, &r.val}) {
    if (s->count() == 0) continue;
    const std::string p = "/" + s->name;
    const std::string x = plan.store_raw ? p + "/x" : p + "/images";
    s->write(w, plan);
    w.set_attr(x, "mean", std::vector<double>(r.mean.begin(), r.mean.end()));
    w.set_attr(x, "std", std::vector<double>(r.std.begin(), r.std.end()));
    if (plan.store_raw)
      w.set_attr(x, "scale", 1.0 / 255);
    else
      w.set_attr(x, "size", side);
    w.set_attr(p + "/y", "num_classes", static_cast<int64_t>(train.classes.size()));
    w.set_attr(p + "/y", "classes", train.classes);
  }
  w.commit();

  char rate[64];
  std::snprintf(rate, sizeof rate, "%.0f files/s on %d threads", r.files_per_s, r.threads);
  std::string stored = plan.store_raw ? "uint8 3x" + std::to_string(r.height) + "x" + std::to_string(r.width)
                                      : std::string(plan.quality ? "re-encoded JPEG" : "the files' bytes");
  std::printf("wrote %s: train %lld images", w.path().c_str(), static_cast<long long>(r.train.count()));
  if (r.val.count() > 0) std::printf(", val %lld", static_cast<long long>(r.val.count()));
  std::printf(", %zu classes (%s, %s; the folder: %s)", train.classes.size(), stored.c_str(),
              mib(r.train.stored_bytes() + r.val.stored_bytes()).c_str(), mib(folder_bytes).c_str());
  if (r.skipped > 0) std::printf("; %lld unreadable file(s) skipped", static_cast<long long>(r.skipped));
  if (train.ignored > 0) std::printf("; %lld other file(s) ignored", static_cast<long long>(train.ignored));
  std::printf("; %s\n", rate);
}

}  // namespace hpc::data_tools
