// .npy header parsing, row conversion, and hpcdata pack --from npy X.npy Y.npy.
#include "npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "commands.h"
#include "core/error.h"

namespace hpc::data_tools {

namespace {

constexpr char MAGIC[] = "\x93NUMPY";

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly n bytes at offset; false at end of file.
bool read_at(int fd, void* out, size_t n, int64_t offset, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(out) + got, n - got, static_cast<off_t>(offset) + got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw UserError(path + ": read failed (" + std::string(std::strerror(errno)) + ")");
    }
    if (r == 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// The value of 'key' in the header dict: the text after "'key':" up to the next top-level ',' or '}'.
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw UserError(path + ": malformed .npy header (no '" + key + "')");
  size_t i = header.find(':', k);
  if (i == std::string::npos) throw UserError(path + ": malformed .npy header ('" + key + "' has no value)");
  ++i;
  int depth = 0;
  size_t j = i;
  for (; j < header.size(); ++j) {
    const char c = header[j];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string v = header.substr(i, j - i);
  const size_t b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
  return b == std::string::npos ? "" : v.substr(b, e - b + 1);
}

std::vector<int64_t> parse_shape(const std::string& v, const std::string& path) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')')
    throw UserError(path + ": malformed .npy header (shape " + v + " is not a tuple)");
  std::vector<int64_t> shape;
  size_t i = 1;
  while (i < v.size() - 1) {
    while (i < v.size() - 1 && (v[i] == ' ' || v[i] == ',')) ++i;
    if (i >= v.size() - 1) break;
    size_t used = 0;
    long long d = 0;
    try {
      d = std::stoll(v.substr(i), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || d < 0) throw UserError(path + ": malformed .npy header (shape " + v + ")");
    shape.push_back(d);
    i += used;
    while (i < v.size() - 1 && v[i] == 'L') ++i;  // Python 2 long suffix
  }
  return shape;
}

double element(const uint8_t* p, const NpyHeader& h) {
  uint8_t b[8] = {};  // item_size is 1, 2, 4 or 8 (checked when the header was read)
  for (int i = 0; i < h.item_size; ++i)
    b[i] = h.big_endian ? p[h.item_size - 1 - i] : p[i];  // to little-endian
  auto as = [&]<typename T>() {
    T v;
    std::memcpy(&v, b, sizeof v);
    return static_cast<double>(v);
  };
  switch (h.kind) {
    case 'b':
      return b[0] != 0;
    case 'u':
      switch (h.item_size) {
        case 1:
          return as.template operator()<uint8_t>();
        case 2:
          return as.template operator()<uint16_t>();
        case 4:
          return as.template operator()<uint32_t>();
        default:
          return as.template operator()<uint64_t>();
      }
    case 'i':
      switch (h.item_size) {
        case 1:
          return as.template operator()<int8_t>();
        case 2:
          return as.template operator()<int16_t>();
        case 4:
          return as.template operator()<int32_t>();
        default:
          return as.template operator()<int64_t>();
      }
    default:
      return h.item_size == 4 ? as.template operator()<float>() : as.template operator()<double>();
  }
}

}  // namespace

NpyHeader read_npy_header(const std::string& path) {
  Fd fd(path);
  if (fd.get() < 0) throw UserError(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || S_ISDIR(st.st_mode)) throw UserError(path + ": not a readable file");
  uint8_t head[12];
  if (!read_at(fd.get(), head, 10, 0, path) || std::memcmp(head, MAGIC, 6) != 0)
    throw UserError(path + ": not a .npy file (wrong magic; expected \\x93NUMPY)");
  const int major = head[6];
  if (major < 1 || major > 3)
    throw UserError(path + ": .npy format version " + std::to_string(major) + " is not supported (1, 2, 3)");
  int64_t header_len = head[8] | head[9] << 8;
  int64_t offset = 10;
  if (major >= 2) {
    if (!read_at(fd.get(), head + 10, 2, 10, path)) throw UserError(path + ": truncated .npy header");
    header_len = int64_t(head[8]) | int64_t(head[9]) << 8 | int64_t(head[10]) << 16 | int64_t(head[11]) << 24;
    offset = 12;
  }
  if (header_len <= 0 || header_len > (1 << 24) || offset + header_len > st.st_size)
    throw UserError(path + ": truncated .npy header");
  std::string header(static_cast<size_t>(header_len), '\0');
  read_at(fd.get(), header.data(), header.size(), offset, path);

  NpyHeader h;
  h.data_offset = offset + header_len;
  std::string descr = dict_value(header, "descr", path);
  if (descr.size() < 4 || (descr.front() != '\'' && descr.front() != '"'))
    throw UserError(path + ": dtype " + descr +
                    " is not supported (structured or object arrays; save a plain "
                    "numeric array)");
  h.descr = descr.substr(1, descr.size() - 2);
  const char order = h.descr[0];
  h.kind = h.descr[1];
  try {
    h.item_size = std::stoi(h.descr.substr(2));
  } catch (const std::exception&) {
    h.item_size = 0;
  }
  const bool sized = (h.kind == 'b' && h.item_size == 1) ||
                     ((h.kind == 'i' || h.kind == 'u') &&
                      (h.item_size == 1 || h.item_size == 2 || h.item_size == 4 || h.item_size == 8)) ||
                     (h.kind == 'f' && (h.item_size == 4 || h.item_size == 8));
  if (!std::strchr("<>|=", order) || !sized)
    throw UserError(path + ": dtype '" + h.descr +
                    "' is not supported (bool, int8-64, uint8-64, float32/64)");
  h.big_endian = order == '>';
  const std::string fortran = dict_value(header, "fortran_order", path);
  if (fortran == "True")
    throw UserError(path + ": the array is in Fortran order; save it with numpy.ascontiguousarray(a)");
  if (fortran != "False") throw UserError(path + ": malformed .npy header (fortran_order " + fortran + ")");
  h.shape = parse_shape(dict_value(header, "shape", path), path);
  if (h.shape.empty()) throw UserError(path + ": holds a scalar, not an array of samples");
  uint64_t elems = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && elems > (uint64_t(1) << 50) / uint64_t(d)) throw UserError(path + ": shape too large");
    elems *= uint64_t(d);
  }
  const uint64_t need = uint64_t(h.data_offset) + elems * uint64_t(h.item_size);
  if (uint64_t(st.st_size) < need)
    throw UserError(path + ": truncated: the header promises " + std::to_string(elems * h.item_size) +
                    " bytes of data, the file holds " + std::to_string(st.st_size - h.data_offset));
  return h;
}

Array npy_array(const std::string& path, const NpyHeader& h, DType to) {
  std::vector<int64_t> dims = h.shape;
  if (to != DType::I32 && dims.size() == 1) dims.push_back(1);  // x: N scalars are N × 1 samples
  const Shape shape(dims);
  int64_t per = 1;
  for (size_t i = 1; i < dims.size(); ++i) per *= dims[i];
  auto fd = std::make_shared<Fd>(path);
  if (fd->get() < 0) throw UserError(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  return Array{to, shape, [fd, h, per, to, path](int64_t first, int64_t n, void* out) {
                 const size_t bytes = static_cast<size_t>(n * per * h.item_size);
                 std::vector<uint8_t> raw(bytes);
                 if (!read_at(fd->get(), raw.data(), bytes, h.data_offset + first * per * h.item_size, path))
                   throw UserError(path + ": truncated (the file shrank while being read)");
                 const int64_t count = n * per;
                 if (to == DType::U8 && h.kind == 'u' && h.item_size == 1) {
                   std::memcpy(out, raw.data(), bytes);
                 } else if (to == DType::F32) {
                   for (int64_t i = 0; i < count; ++i) {
                     const double v = element(raw.data() + i * h.item_size, h);
                     // hpctrain refuses NaN/Inf inputs: say so now, naming the row, not at training time.
                     if (!(std::fabs(v) <= std::numeric_limits<float>::max()))
                       throw UserError(path + ": value " + format_number(v) + " at row " +
                                       std::to_string(first + i / per) + " is not a finite float32");
                     static_cast<float*>(out)[i] = static_cast<float>(v);
                   }
                 } else {
                   HPC_ASSERT(to == DType::I32, "npy_array: unsupported target dtype");
                   for (int64_t i = 0; i < count; ++i) {
                     const double v = element(raw.data() + i * h.item_size, h);
                     if (!(v >= -2147483648.0 && v <= 2147483647.0) || v != std::floor(v))
                       throw UserError(path + ": value " + format_number(v) + " at row " +
                                       std::to_string(first + i / per) + " is not an int32 class id");
                     static_cast<int32_t*>(out)[i] = static_cast<int32_t>(v);
                   }
                 }
               }};
}

PackJob read_npy(const PackOptions& opt) {
  auto split = [&](const std::vector<std::string>& files, const char* which) {
    if (files.size() != 2)
      throw UserError(std::string("pack --from npy: ") + which + " needs 2 files, X.npy and Y.npy (got " +
                      std::to_string(files.size()) + ")");
    const NpyHeader hx = read_npy_header(files[0]), hy = read_npy_header(files[1]);
    if (hx.kind == 'b') throw UserError(files[0] + ": x of dtype bool is not supported (uint8 or float)");
    if (hy.shape.size() > 2 || (hy.kind != 'f' && hy.shape.size() == 2 && hy.shape[1] != 1))
      throw UserError(files[1] + ": y must be N class ids (integers) or N x k float targets, got shape " +
                      Shape(hy.shape).str() + " of " + hy.descr);
    if (hy.kind == 'b') throw UserError(files[1] + ": y of dtype bool: save class ids as integers");
    const DType xt = hx.kind == 'u' && hx.item_size == 1 ? DType::U8 : DType::F32;
    NpyHeader hy_flat = hy;
    if (hy.kind != 'f') hy_flat.shape.resize(1);  // N × 1 class ids are N class ids
    return Split{npy_array(files[0], hx, xt),
                 npy_array(files[1], hy_flat, hy.kind == 'f' ? DType::F32 : DType::I32), files[0], files[1]};
  };
  PackJob job;
  job.train = split(opt.inputs, "the training set");
  if (!opt.val_inputs.empty()) job.val = split(opt.val_inputs, "--val");
  job.val_fraction = opt.val_fraction.value_or(0);
  job.num_classes = opt.classes;
  job.scale = opt.scale;
  job.mean = opt.mean;
  job.std = opt.std;
  return job;
}

}  // namespace hpc::data_tools
