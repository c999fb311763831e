// Decoding the image files in parallel and writing them in order (see pack_images.h).
#include "pack_images.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "data/image_codec.h"
#include "data/image_resample.h"
#include "dataset_writer.h"

namespace hpc::data_tools {

using data::RgbImage;

namespace {

constexpr int64_t WINDOW_PER_THREAD = 8;          // results decoded ahead of the writer, per worker
constexpr size_t WRITE_BLOCK = size_t(16) << 20;  // bytes per HDF5 write

using Histogram = std::array<std::array<uint64_t, 256>, 3>;

// What a worker makes of one file.
struct Processed {
  std::string error;  // non-empty: not an image (the reason)
  std::vector<uint8_t>
      payload;             // what is stored: raw planar pixels or re-encoded bytes (empty: the file's own)
  int64_t file_bytes = 0;  // the file's size (jpeg store: the bytes stored)
  int64_t height = 0, width = 0;  // as decoded
  Histogram hist{};
};

[[noreturn]] void throw_io(const std::string& what, int err) {
  if (err == ENOSPC) throw IoError(what + ": no space left on device (ENOSPC)");
  if (err == EDQUOT) throw IoError(what + ": disk quota exceeded (EDQUOT)");
  throw UserError(what + " (" + std::strerror(err) + ")");
}

// The whole file, or nullopt with `error` set.
std::optional<std::vector<uint8_t>> read_file(const std::string& path, std::string& error) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) {
    error = std::string("cannot open it (") + std::strerror(errno) + ")";
    return std::nullopt;
  }
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, f.get())) > 0;)
    bytes.insert(bytes.end(), buf, buf + got);
  if (std::ferror(f.get())) {
    error = std::string("read error (") + std::strerror(errno) + ")";
    return std::nullopt;
  }
  return bytes;
}

// Interleaved RGB → planar 3 × h × w, resampled from the whole image (PIL's bilinear).
std::vector<uint8_t> resize_planar(const RgbImage& im, int64_t h, int64_t w) {
  std::vector<uint8_t> out(static_cast<size_t>(3 * h * w)), scratch;
  const data::ResampleAxis rows = data::bilinear_axis(im.height, 0, double(im.height), h);
  const data::ResampleAxis cols = data::bilinear_axis(im.width, 0, double(im.width), w);
  data::resample_rgb({im.pixels.data(), 0, 0, im.height, im.width, im.width * 3}, rows, cols, out.data(),
                     scratch);
  return out;
}

void add_interleaved(const std::vector<uint8_t>& rgb, Histogram& h) {
  for (size_t i = 0; i + 2 < rgb.size(); i += 3)
    for (size_t c = 0; c < 3; ++c) ++h[c][rgb[i + c]];
}

Processed process(const std::string& path, const PackPlan& plan) {
  Processed p;
  std::optional<std::vector<uint8_t>> bytes = read_file(path, p.error);
  if (!bytes) return p;
  p.file_bytes = static_cast<int64_t>(bytes->size());
  try {
    RgbImage im = data::decode_rgb(bytes->data(), bytes->size());
    p.height = im.height, p.width = im.width;
    if (plan.store_raw) {
      const int64_t h = plan.height > 0 ? plan.height : im.height, w = plan.width > 0 ? plan.width : im.width;
      p.payload = h == im.height && w == im.width ? std::vector<uint8_t>() : resize_planar(im, h, w);
      if (p.payload.empty()) {  // the image as it is, planar
        p.payload.resize(im.pixels.size());
        const int64_t plane = h * w;
        for (int64_t i = 0; i < plane; ++i)
          for (int64_t c = 0; c < 3; ++c)
            p.payload[static_cast<size_t>(c * plane + i)] = im.pixels[static_cast<size_t>(3 * i + c)];
      }
      const size_t plane = p.payload.size() / 3;
      for (size_t c = 0; c < 3; ++c)
        for (size_t i = 0; i < plane; ++i) ++p.hist[c][p.payload[c * plane + i]];
      return p;
    }
    add_interleaved(im.pixels, p.hist);
    if (plan.quality == 0) return p;  // the file's own bytes are stored (pass 2 reads them again)
    const int64_t longer = std::max(im.height, im.width);
    if (plan.max_side > 0 && longer > plan.max_side) {
      const double s = double(plan.max_side) / double(longer);
      const int64_t h = std::max<int64_t>(1, std::llround(double(im.height) * s)),
                    w = std::max<int64_t>(1, std::llround(double(im.width) * s));
      const std::vector<uint8_t> planar = resize_planar(im, h, w);
      RgbImage small;
      small.height = h, small.width = w;
      small.pixels.resize(planar.size());
      for (int64_t i = 0; i < h * w; ++i)
        for (int64_t c = 0; c < 3; ++c)
          small.pixels[static_cast<size_t>(3 * i + c)] = planar[static_cast<size_t>(c * h * w + i)];
      im = std::move(small);
    }
    p.payload = data::encode_jpeg(im, plan.quality);
  } catch (const data::ImageError& e) {
    p.error = e.what();
  }
  return p;
}

// Workers claim files in order, at most `window` ahead of the consumer; the
// consumer takes results strictly in order.
class Pool {
 public:
  Pool(const std::vector<ImageFile>& files, const PackPlan& plan, int threads)
      : files_(files),
        plan_(plan),
        window_(WINDOW_PER_THREAD * threads),
        slots_(static_cast<size_t>(window_)) {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    claim_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // The result for file i (i = 0, 1, … in order).
  Processed take(int64_t i) {
    std::unique_lock<std::mutex> lock(mutex_);
    Slot& s = slots_[static_cast<size_t>(i % window_)];
    ready_cv_.wait(lock, [&] { return s.ready && s.index == i; });
    Processed p = std::move(s.result);
    s.ready = false;
    consumed_ = i + 1;
    claim_cv_.notify_all();
    return p;
  }

 private:
  struct Slot {
    int64_t index = -1;
    bool ready = false;
    Processed result;
  };

  void work() {
    const auto n = static_cast<int64_t>(files_.size());
    for (;;) {
      int64_t i = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        claim_cv_.wait(lock, [&] { return stopping_ || next_ >= n || next_ < consumed_ + window_; });
        if (stopping_ || next_ >= n) return;
        i = next_++;
      }
      Processed p = process(files_[static_cast<size_t>(i)].path, plan_);
      std::lock_guard<std::mutex> lock(mutex_);
      Slot& s = slots_[static_cast<size_t>(i % window_)];
      s.index = i;
      s.result = std::move(p);
      s.ready = true;
      ready_cv_.notify_all();
    }
  }

  const std::vector<ImageFile>& files_;
  const PackPlan& plan_;
  const int64_t window_;
  std::vector<Slot> slots_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable claim_cv_, ready_cv_;
  int64_t next_ = 0, consumed_ = 0;
  bool stopping_ = false;
};

// "pack: 1200/5000 files (24%), 830 files/s": redrawn on a terminal; in a log, a line every
// PLAIN_EVERY seconds and the last one.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(::isatty(2) != 0), t0_(Clock::now()) {}
  void update(int64_t done) {
    const double s = seconds();
    if (done != total_ && s - last_ < (tty_ ? 0.5 : PLAIN_EVERY)) return;
    last_ = s;
    std::fprintf(stderr, "%spack: %lld/%lld files (%.0f%%), %.0f files/s%s", tty_ ? "\r" : "",
                 static_cast<long long>(done), static_cast<long long>(total_),
                 100.0 * double(done) / double(total_), s > 0 ? double(done) / s : 0.0,
                 tty_ && done != total_ ? "" : "\n");
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr double PLAIN_EVERY = 10;
  int64_t total_;
  bool tty_;
  Clock::time_point t0_;
  double last_ = 0;
};

}  // namespace

Spill::Spill(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "w+b");
  if (!f_) throw_io("cannot create the temporary file " + path_, errno);
}

Spill::~Spill() {
  if (f_) std::fclose(f_);
  std::remove(path_.c_str());
}

void Spill::append(const uint8_t* data, size_t n) {
  if (std::fwrite(data, 1, n, f_) != n) throw_io("cannot write the temporary file " + path_, errno);
}

void Spill::rewind() {
  if (std::fflush(f_) != 0) throw_io("cannot write the temporary file " + path_, errno);
  std::rewind(f_);
}

void Spill::read(uint8_t* out, size_t n) {
  if (std::fread(out, 1, n, f_) != n) throw UserError("cannot read back the temporary file " + path_);
}

int64_t PackedSplit::stored_bytes() const {
  return height > 0 ? count() * 3 * height * width : offsets.back();
}

void PackedSplit::write(DatasetWriter& w, const PackPlan& plan) const {
  const std::string p = "/" + name;
  const int64_t n = count();
  std::vector<uint8_t> block;
  if (plan.store_raw) {
    const int64_t row = 3 * height * width;
    const int64_t rows_per_block = std::max<int64_t>(1, static_cast<int64_t>(WRITE_BLOCK) / row);
    w.create(p + "/x", DType::U8, Shape{n, 3, height, width});
    spill->rewind();
    for (int64_t at = 0; at < n; at += rows_per_block) {
      const int64_t rows = std::min(rows_per_block, n - at);
      block.resize(static_cast<size_t>(rows * row));
      spill->read(block.data(), block.size());
      w.write_rows(p + "/x", at, rows, block.data());
    }
  } else {
    w.create(p + "/images", DType::U8, Shape{offsets.back()});
    if (spill) spill->rewind();
    int64_t written = 0;
    auto flush = [&] {
      w.write_rows(p + "/images", written, static_cast<int64_t>(block.size()), block.data());
      written += static_cast<int64_t>(block.size());
      block.clear();
    };
    for (int64_t i = 0; i < n; ++i) {
      const auto size =
          static_cast<size_t>(offsets[static_cast<size_t>(i + 1)] - offsets[static_cast<size_t>(i)]);
      const size_t at = block.size();
      block.resize(at + size);
      if (spill) {
        spill->read(block.data() + at, size);
      } else {
        std::string error;
        std::optional<std::vector<uint8_t>> bytes = read_file(paths[static_cast<size_t>(i)], error);
        if (!bytes) throw UserError(paths[static_cast<size_t>(i)] + ": " + error);
        if (bytes->size() != size)
          throw UserError(paths[static_cast<size_t>(i)] + ": changed while being packed (" +
                          std::to_string(bytes->size()) + " bytes now, " + std::to_string(size) + " before)");
        std::copy(bytes->begin(), bytes->end(), block.begin() + static_cast<std::ptrdiff_t>(at));
      }
      if (block.size() >= WRITE_BLOCK) flush();
    }
    if (!block.empty()) flush();
    w.write_i64(p + "/offsets", offsets);
  }
  w.write(p + "/y", labels.data(), DType::I32, Shape{n});
}

PackResult pack_images(const std::vector<ImageFile>& files, const std::vector<char>& is_val,
                       const PackPlan& plan) {
  PackResult r;
  r.train.name = "train";
  r.val.name = "val";
  const bool spill = plan.store_raw || plan.quality > 0;
  if (spill) {
    r.train.spill = std::make_unique<Spill>(plan.spill_prefix + "-train");
    if (!is_val.empty()) r.val.spill = std::make_unique<Spill>(plan.spill_prefix + "-val");
  }
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  r.threads = std::max(
      1, std::min<int>(plan.threads > 0 ? plan.threads : std::max(hw, 1), static_cast<int>(files.size())));
  Histogram hist{};
  std::string first_size_file;  // raw without --size: the file whose size every image must have
  Progress progress(static_cast<int64_t>(files.size()));
  {
    Pool pool(files, plan, r.threads);
    for (size_t i = 0; i < files.size(); ++i) {
      Processed p = pool.take(static_cast<int64_t>(i));
      const ImageFile& f = files[i];
      if (!p.error.empty()) {
        if (!plan.skip_errors)
          throw UserError(f.path + ": " + p.error + " (--on-error skip leaves such files out)");
        std::fprintf(stderr, "%shpcdata: warning: skipped %s: %s\n", ::isatty(2) ? "\n" : "", f.path.c_str(),
                     p.error.c_str());
        ++r.skipped;
        progress.update(static_cast<int64_t>(i + 1));
        continue;
      }
      const bool val = !is_val.empty() && is_val[i];
      PackedSplit& s = val ? r.val : r.train;
      if (plan.store_raw) {
        const int64_t h = plan.height > 0 ? plan.height : p.height, w = plan.width > 0 ? plan.width : p.width;
        if (r.height == 0) r.height = h, r.width = w, first_size_file = f.path;
        if (h != r.height || w != r.width)
          throw UserError(f.path + " is " + std::to_string(p.width) + "x" + std::to_string(p.height) +
                          " but " + first_size_file + " is " + std::to_string(r.width) + "x" +
                          std::to_string(r.height) +
                          ": --store raw needs one size; give --size SIDE or HxW to resize every image");
        s.height = h, s.width = w;
      }
      s.labels.push_back(f.label);
      if (spill) {
        s.spill->append(p.payload.data(), p.payload.size());
        s.offsets.push_back(s.offsets.back() + static_cast<int64_t>(p.payload.size()));
      } else {
        s.paths.push_back(f.path);
        s.offsets.push_back(s.offsets.back() + p.file_bytes);
      }
      if (!val)
        for (size_t c = 0; c < 3; ++c)
          for (size_t b = 0; b < 256; ++b) hist[c][b] += p.hist[c][b];
      progress.update(static_cast<int64_t>(i + 1));
    }
  }
  r.files_per_s = double(files.size()) / std::max(progress.seconds(), 1e-9);
  if (r.train.count() == 0)
    throw UserError("no training image could be read (" + std::to_string(r.skipped) + " skipped)");
  if (!is_val.empty() && r.val.count() == 0)
    throw UserError("no validation image could be read (" + std::to_string(r.skipped) + " skipped)");
  for (size_t c = 0; c < 3; ++c) {
    double n = 0, sum = 0, sq = 0;
    for (size_t b = 0; b < 256; ++b) {
      const double k = double(hist[c][b]), v = double(b) / 255.0;
      n += k, sum += k * v, sq += k * v * v;
    }
    r.mean[c] = sum / n;
    r.std[c] = std::sqrt(std::max(0.0, sq / n - r.mean[c] * r.mean[c]));
    if (!(r.std[c] > 0)) r.std[c] = 1;  // a constant channel: centre it, do not divide by 0
  }
  return r;
}

}  // namespace hpc::data_tools
