// write_packed: stream Arrays into /train and /val, with attributes.
#include "pack.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/rng.h"

namespace hpc::data_tools {

namespace {

constexpr uint64_t VAL_SPLIT_SEED = 0;     // fixed: the same input always gives the same split
constexpr int64_t BLOCK_BYTES = 16 << 20;  // rows read and written per block (x)
// The largest class id: num_classes (max id + 1) must fit an int32, as hpctrain reads it.
constexpr int32_t MAX_CLASS_ID = std::numeric_limits<int32_t>::max() - 1;

struct Stats {
  std::array<uint64_t, 256> pixels[2]{};  // histograms of uint8 x: [0] the train split, [1] val
  int64_t max_label = -1;
};

// Checks and tallies the class ids of rows [first, first + n) of `src`.
void check_labels(const int32_t* y, int64_t n, int64_t first, const PackJob& job, const std::string& source,
                  Stats& st) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t v = y[i];
    if (v < 0 || v > MAX_CLASS_ID || (job.num_classes > 0 && v >= job.num_classes))
      throw UserError(source + ": label " + std::to_string(v) + " at row " + std::to_string(first + i) +
                      " is not a class id" +
                      (job.num_classes > 0 ? " in [0, " + std::to_string(job.num_classes) + ")"
                                           : " in [0, " + std::to_string(MAX_CLASS_ID) + "]"));
    st.max_label = std::max<int64_t>(st.max_label, v);
  }
}

// Destination of a stream of rows in the output.
struct Sink {
  std::string x, y;  // "/train/x", "/train/y"
  int64_t written = 0;
  bool is_train = true;
};

// Streams `split` into the sinks; row i goes to sinks[is_val[i]] (or sinks[0] without is_val).
void stream(DatasetWriter& w, const Split& split, const std::vector<char>* is_val, Sink* sinks[2],
            const PackJob& job, Stats& st) {
  const int64_t n = split.x.rows(), xb = split.x.row_bytes(), yb = split.y.row_bytes();
  const int64_t block = std::max<int64_t>(1, BLOCK_BYTES / xb);
  std::vector<std::byte> x(static_cast<size_t>(std::min(block, n) * xb)),
      y(static_cast<size_t>(std::min(block, n) * yb));
  std::vector<std::byte> part_x[2], part_y[2];
  for (int64_t first = 0; first < n; first += block) {
    const int64_t count = std::min(block, n - first);
    split.x.read(first, count, x.data());
    split.y.read(first, count, y.data());
    if (split.y.dtype == DType::I32)
      check_labels(reinterpret_cast<const int32_t*>(y.data()), count, first, job,
                   split.y_source.empty() ? split.source : split.y_source, st);
    for (int s = 0; s < 2; ++s) part_x[s].clear(), part_y[s].clear();
    for (int64_t i = 0; i < count; ++i) {
      const int s = is_val ? (*is_val)[static_cast<size_t>(first + i)] : 0;
      part_x[s].insert(part_x[s].end(), x.begin() + i * xb, x.begin() + (i + 1) * xb);
      part_y[s].insert(part_y[s].end(), y.begin() + i * yb, y.begin() + (i + 1) * yb);
    }
    for (int s = 0; s < 2; ++s) {
      if (part_x[s].empty()) continue;
      Sink& sink = *sinks[s];
      const int64_t rows = static_cast<int64_t>(part_x[s].size()) / xb;
      if (split.x.dtype == DType::U8)
        for (std::byte b : part_x[s]) ++st.pixels[sink.is_train ? 0 : 1][static_cast<uint8_t>(b)];
      w.write_rows(sink.x, sink.written, rows, part_x[s].data());
      w.write_rows(sink.y, sink.written, rows, part_y[s].data());
      sink.written += rows;
    }
  }
}

void check_compatible(const Split& train, const Split& val) {
  // x dtypes may differ (hpctrain converts each split on its own); shapes and targets may not.
  const Shape tx = train.x.shape.without_batch(), vx = val.x.shape.without_batch();
  if (tx != vx)
    throw UserError(val.source + ": val samples are " + vx.str() + " " + dtype_name(val.x.dtype) +
                    " but train samples (" + train.source + ") are " + tx.str() + " " +
                    dtype_name(train.x.dtype));
  if (train.y.dtype != val.y.dtype || train.y.shape.without_batch() != val.y.shape.without_batch())
    throw UserError(val.source + ": val targets are " + std::string(dtype_name(val.y.dtype)) + " " +
                    val.y.shape.without_batch().str() + " but train targets are " +
                    dtype_name(train.y.dtype) + " " + train.y.shape.without_batch().str());
}

void check_split(const Split& s) {
  if (s.x.rows() != s.y.rows())
    throw UserError(s.source + ": " + std::to_string(s.x.rows()) + " samples but " +
                    std::to_string(s.y.rows()) + " labels/targets");
  if (s.x.rows() == 0) throw UserError(s.source + ": no samples");
  if (s.x.shape.rank() < 2 || s.x.shape.count() == 0) throw UserError(s.source + ": samples of size 0");
  if (s.y.shape.rank() > 1 && s.y.shape.without_batch().count() == 0)
    throw UserError(s.source + ": zero targets per sample (y is " + s.y.shape.str() + ")");
}

std::string describe(const Split& s, int64_t rows) {
  return std::to_string(rows) + " x " + s.x.shape.without_batch().str() + " " + dtype_name(s.x.dtype);
}

}  // namespace

std::string format_number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

std::vector<char> val_rows(int64_t n, double fraction) {
  if (n < 2) throw UserError("--val-fraction needs at least 2 training samples");
  const int64_t n_val = std::min(n - 1, std::max<int64_t>(1, std::llround(fraction * double(n))));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  Rng rng(VAL_SPLIT_SEED);
  std::vector<char> is_val(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n_val; ++i) {  // partial Fisher–Yates: the first n_val of a permutation
    std::swap(order[static_cast<size_t>(i)],
              order[static_cast<size_t>(i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i))))]);
    is_val[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
  }
  return is_val;
}

void write_packed(DatasetWriter& w, const PackJob& job) {
  check_split(job.train);
  if (job.val) {
    check_split(*job.val);
    check_compatible(job.train, *job.val);
  }
  std::vector<char> is_val;
  if (job.val_fraction > 0) is_val = val_rows(job.train.x.rows(), job.val_fraction);
  const int64_t carved = std::count(is_val.begin(), is_val.end(), 1);
  const int64_t n_train = job.train.x.rows() - carved;
  const int64_t n_val = carved + (job.val ? job.val->x.rows() : 0);

  const std::string tn = "/" + job.train_name;
  Sink train{tn + "/x", tn + "/y", 0, true}, val{"/val/x", "/val/y", 0, false};
  const Shape xs = job.train.x.shape.without_batch(), ys = job.train.y.shape.without_batch();
  w.create(train.x, job.train.x.dtype, xs.with_batch(n_train));
  w.create(train.y, job.train.y.dtype, ys.with_batch(n_train));
  const DType val_x = job.val ? job.val->x.dtype : job.train.x.dtype;
  if (n_val > 0) {
    w.create(val.x, val_x, xs.with_batch(n_val));
    w.create(val.y, job.train.y.dtype, ys.with_batch(n_val));
  }
  Stats st;
  Sink* sinks[2] = {&train, &val};
  stream(w, job.train, is_val.empty() ? nullptr : &is_val, sinks, job, st);
  if (job.val) {
    Sink* only_val[2] = {&val, &val};
    stream(w, *job.val, nullptr, only_val, job, st);
  }

  const bool classes = job.train.y.dtype == DType::I32;
  const int64_t num_classes = job.num_classes > 0 ? job.num_classes : st.max_label + 1;
  for (const Sink* s : {&train, &val}) {
    if (s->written == 0) continue;
    const Split& origin = s == &val && job.val ? *job.val : job.train;
    if (origin.scale) {  // kept as they were (repack)
      w.set_attr(s->x, "scale", *origin.scale);
      if (!origin.channel_mean.empty()) {
        w.set_attr(s->x, "mean", origin.channel_mean);
        w.set_attr(s->x, "std", origin.channel_std);
      } else {
        w.set_attr(s->x, "mean", origin.mean.value_or(0.0));
        w.set_attr(s->x, "std", origin.std.value_or(1.0));
      }
    } else if (origin.x.dtype == DType::U8) {
      double scale = job.scale.value_or(1.0 / 255), mean = 0, std = 1;
      if (!job.mean || !job.std) {
        // Mean and std of the scaled training pixels (val's when train is not uint8), exact from the
        // histogram.
        const auto& hist = job.train.x.dtype == DType::U8 ? st.pixels[0] : st.pixels[1];
        double n = 0, sum = 0, sq = 0;
        for (int b = 0; b < 256; ++b) {
          const double c = double(hist[static_cast<size_t>(b)]), v = b * scale;
          n += c, sum += c * v, sq += c * v * v;
        }
        mean = sum / std::max(1.0, n);
        std = std::sqrt(std::max(0.0, sq / std::max(1.0, n) - mean * mean));
        if (!(std > 0)) std = 1;  // a constant image set: centre it, do not divide by 0
      }
      w.set_attr(s->x, "scale", scale);
      w.set_attr(s->x, "mean", job.mean.value_or(mean));
      w.set_attr(s->x, "std", job.std.value_or(std));
    }
    if (classes) w.set_attr(s->y, "num_classes", num_classes);
    if (classes && !origin.classes.empty()) w.set_attr(s->y, "classes", origin.classes);
  }
  w.commit();

  std::printf("wrote %s: %s %s", w.path().c_str(), job.train_name.c_str(),
              describe(job.train, n_train).c_str());
  if (n_val > 0) std::printf(", val %lld", static_cast<long long>(n_val));
  if (classes)
    std::printf(", %lld classes\n", static_cast<long long>(num_classes));
  else
    std::printf(", targets of %lld float32\n", static_cast<long long>(ys.count()));
}

}  // namespace hpc::data_tools
