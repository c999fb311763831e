// hpcdata pack --from csv FILE: a numeric table → float32 features + labels.
//
// One sample per line, cells separated by --delimiter (default ','),
// surrounding spaces ignored, blank lines skipped, plain or gzipped. The
// first line is a header when any of its cells is not a number. By default
// the last column holds class ids (non-negative integers) and every other
// column is a float32 feature; --label-col picks another column (0-based
// index or header name); --targets K makes the last K columns float32
// regression targets instead. Every row must have the header's (or the
// first row's) number of cells, and every cell must be a finite number:
// otherwise one error line names the file, the line and the column.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "idx.h"

namespace hpc::data_tools {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> cells_of(const std::string& line, char delim) {
  std::vector<std::string> cells;
  size_t start = 0;
  for (;;) {
    const size_t end = line.find(delim, start);
    cells.push_back(trim(line.substr(start, end == std::string::npos ? std::string::npos : end - start)));
    if (end == std::string::npos) return cells;
    start = end + 1;
  }
}

bool parse_number(const std::string& cell, double& v) {
  if (cell.empty()) return false;
  char* end = nullptr;
  v = std::strtod(cell.c_str(), &end);
  return end == cell.c_str() + cell.size() && std::isfinite(v);
}

std::string quoted(const std::string& s) { return "'" + (s.size() > 40 ? s.substr(0, 40) + "…" : s) + "'"; }

struct Table {
  std::vector<std::string> header;  // empty without a header line
  std::vector<std::vector<double>> rows;
  std::vector<int64_t> line_of;  // 1-based line number of each row
};

Table read_table(const std::string& path, char delim) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  const std::string text(bytes.begin(), bytes.end());
  Table t;
  size_t width = 0;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (trim(line).empty()) continue;
    const std::vector<std::string> cells = cells_of(line, delim);
    const std::string where = path + ":" + std::to_string(line_no);
    if (width == 0) {
      width = cells.size();
      double v;
      bool numeric = true;
      for (const std::string& c : cells) numeric = numeric && parse_number(c, v);
      if (!numeric) {
        t.header = cells;
        continue;
      }
    }
    if (cells.size() != width)
      throw UserError(where + ": " + std::to_string(cells.size()) + " cells, expected " +
                      std::to_string(width) + " (every row needs the same number of columns; delimiter '" +
                      std::string(1, delim) + "')");
    std::vector<double> row(width);
    for (size_t c = 0; c < width; ++c) {
      const std::string column = t.header.empty() ? std::to_string(c) : quoted(t.header[c]);
      if (!parse_number(cells[c], row[c]))
        throw UserError(where + ": column " + column + " " + quoted(cells[c]) + " is not a finite number");
      // Features and targets are stored as float32, where a larger value would become Inf.
      if (std::fabs(row[c]) > std::numeric_limits<float>::max())
        throw UserError(where + ": column " + column + " " + quoted(cells[c]) +
                        " is outside the float32 range (|x| <= 3.4e38)");
    }
    t.rows.push_back(std::move(row));
    t.line_of.push_back(line_no);
  }
  if (t.rows.empty()) throw UserError(path + ": no data rows");
  return t;
}

// The column index of --label-col: an index, or a header name.
size_t label_column(const Table& t, const std::string& want, const std::string& path) {
  const size_t width = t.rows[0].size();
  if (want.empty()) return width - 1;
  for (size_t c = 0; c < t.header.size(); ++c)
    if (t.header[c] == want) return c;
  char* end = nullptr;
  const long v = std::strtol(want.c_str(), &end, 10);
  if (end == want.c_str() + want.size() && v >= 0 && static_cast<size_t>(v) < width)
    return static_cast<size_t>(v);
  throw UserError(path + ": --label-col " + want + " is neither a header name nor a column index 0.." +
                  std::to_string(width - 1));
}

Split to_split(const std::string& path, const PackOptions& opt) {
  const Table t = read_table(path, opt.delimiter);
  const int64_t n = static_cast<int64_t>(t.rows.size()), width = static_cast<int64_t>(t.rows[0].size());
  const int64_t k = opt.targets;
  if (k > 0 && k >= width)
    throw UserError(path + ": --targets " + std::to_string(k) + " leaves no feature column (" +
                    std::to_string(width) + " columns)");
  if (k == 0 && width < 2) throw UserError(path + ": one column: no features besides the label");
  const size_t label = k > 0 ? 0 : label_column(t, opt.label_col, path);
  std::vector<float> x, targets;
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<double>& row = t.rows[static_cast<size_t>(r)];
    for (int64_t c = 0; c < width; ++c) {
      const bool is_target = k > 0 ? c >= width - k : static_cast<size_t>(c) == label;
      if (!is_target) {
        x.push_back(static_cast<float>(row[static_cast<size_t>(c)]));
      } else if (k > 0) {
        targets.push_back(static_cast<float>(row[static_cast<size_t>(c)]));
      } else {
        const double v = row[static_cast<size_t>(c)];
        if (v < 0 || v != std::floor(v) || v > 2147483647.0)
          throw UserError(path + ":" + std::to_string(t.line_of[static_cast<size_t>(r)]) + ": label " +
                          quoted(format_number(v)) + " (column " +
                          (t.header.empty() ? std::to_string(c) : quoted(t.header[static_cast<size_t>(c)])) +
                          ") is not a class id (a non-negative integer); use --targets K for regression");
        ids.push_back(static_cast<int32_t>(v));
      }
    }
  }
  const int64_t features = width - (k > 0 ? k : 1);
  Array y = k > 0 ? memory_array(std::move(targets), DType::F32, Shape{n, k})
                  : memory_array(std::move(ids), DType::I32, Shape{n});
  return Split{memory_array(std::move(x), DType::F32, Shape{n, features}), std::move(y), path};
}

}  // namespace

PackJob read_csv(const PackOptions& opt) {
  if (opt.inputs.size() != 1) throw UserError("pack --from csv takes one FILE (and --val FILE)");
  if (opt.val_inputs.size() > 1) throw UserError("pack --from csv: --val takes one FILE");
  if (opt.targets > 0 && !opt.label_col.empty())
    throw UserError("pack --from csv: --label-col and --targets exclude each other");
  PackJob job;
  job.train = to_split(opt.inputs[0], opt);
  if (!opt.val_inputs.empty()) job.val = to_split(opt.val_inputs[0], opt);
  job.val_fraction = opt.val_fraction.value_or(0);
  job.num_classes = opt.classes;
  return job;
}

}  // namespace hpc::data_tools
