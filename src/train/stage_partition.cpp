// Stage partition (stage_partition.h). The balanced cut is the classic
// linear-partition dynamic programme over "units" (a block with the
// non-block layers that must stay with it): O(P·V·n²) on at most a few
// hundred units, exact, and deterministic (the earliest best cut wins).
#include "train/stage_partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace hpc::train {
namespace {

// The layer indices where a piece may start (always 0 first), ending with n.
std::vector<int> unit_bounds(const std::vector<LayerCost>& layers) {
  const int n = static_cast<int>(layers.size());
  const bool has_blocks =
      std::any_of(layers.begin(), layers.end(), [](const LayerCost& l) { return l.is_block; });
  std::vector<int> bounds = {0};
  bool seen_block = false;
  for (int i = 0; i < n; ++i) {
    const bool cut_here = has_blocks ? (layers[i].is_block && seen_block) : i > 0;
    if (cut_here) bounds.push_back(i);
    seen_block = seen_block || layers[i].is_block;
  }
  bounds.push_back(n);
  return bounds;
}

int count_blocks(const std::vector<LayerCost>& layers) {
  return static_cast<int>(
      std::count_if(layers.begin(), layers.end(), [](const LayerCost& l) { return l.is_block; }));
}

StagePartition from_cuts(const std::vector<LayerCost>& layers, const std::vector<int>& cuts, int stages,
                         int chunks) {
  StagePartition part;
  part.stages = stages;
  part.chunks = chunks;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    StagePiece p;
    p.stage = static_cast<int>(k) % stages;
    p.chunk = static_cast<int>(k) / stages;
    p.first = cuts[k];
    p.last = cuts[k + 1];
    for (int i = p.first; i < p.last; ++i) {
      p.flops += layers[i].flops;
      p.activation_bytes += layers[i].activation_bytes;
      p.parameters += layers[i].parameters;
      p.blocks += layers[i].is_block ? 1 : 0;
    }
    part.total_flops += p.flops;
    part.pieces.push_back(p);
  }
  return part;
}

void check_counts(int stages, int chunks) {
  if (stages < 1) throw UserError("dist.pp must be at least 1, got " + std::to_string(stages));
  if (chunks < 1) throw UserError("dist.pp_virtual must be at least 1, got " + std::to_string(chunks));
}

std::string si(double x) {
  char buf[32];
  if (x < 1e3)
    std::snprintf(buf, sizeof buf, "%.0f", x);
  else if (x < 1e6)
    std::snprintf(buf, sizeof buf, "%.1f k", x / 1e3);
  else if (x < 1e9)
    std::snprintf(buf, sizeof buf, "%.1f M", x / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f G", x / 1e9);
  return buf;
}

}  // namespace

double StagePartition::stage_flops(int stage) const {
  double sum = 0;
  for (int c = 0; c < chunks; ++c) sum += piece(stage, c).flops;
  return sum;
}

StagePartition partition_balanced(const std::vector<LayerCost>& layers, int stages, int chunks) {
  check_counts(stages, chunks);
  const std::vector<int> bounds = unit_bounds(layers);
  const int units = static_cast<int>(bounds.size()) - 1;
  const int pieces = stages * chunks;
  if (units < pieces) {
    const bool blocks = count_blocks(layers) > 0;
    throw UserError("the model has " + std::to_string(units) + (blocks ? " blocks" : " layers") +
                    ", fewer than dist.pp × dist.pp_virtual = " + std::to_string(stages) + " × " +
                    std::to_string(chunks) + " pipeline pieces");
  }
  std::vector<double> prefix(static_cast<size_t>(units) + 1, 0.0);
  for (int u = 0; u < units; ++u) {
    double c = 0;
    for (int i = bounds[u]; i < bounds[u + 1]; ++i) c += layers[i].flops;
    prefix[u + 1] = prefix[u] + c;
  }
  // best[k][i]: the smallest largest cost of cutting units [0, i) into k pieces.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(pieces + 1, std::vector<double>(units + 1, inf));
  std::vector<std::vector<int>> from(pieces + 1, std::vector<int>(units + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= pieces; ++k)
    for (int i = k; i <= units; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double c = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (c < best[k][i]) {
          best[k][i] = c;
          from[k][i] = j;
        }
      }
  std::vector<int> cuts(static_cast<size_t>(pieces) + 1);
  cuts[pieces] = bounds[units];
  for (int k = pieces, i = units; k > 0; --k) {
    i = from[k][i];
    cuts[k - 1] = bounds[i];
  }
  return from_cuts(layers, cuts, stages, chunks);
}

StagePartition partition_explicit(const std::vector<LayerCost>& layers, const std::string& pp_split,
                                  int stages, int chunks) {
  check_counts(stages, chunks);
  std::vector<int> counts;
  std::stringstream in(pp_split);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" 0123456789", 0) != std::string::npos)
      throw UserError("dist.pp_split = " + pp_split + " is not a comma-separated list of block counts");
    counts.push_back(v);
  }
  const int pieces = stages * chunks;
  if (static_cast<int>(counts.size()) != pieces)
    throw UserError("dist.pp_split = " + pp_split + " has " + std::to_string(counts.size()) +
                    " entries, dist.pp × dist.pp_virtual = " + std::to_string(pieces) +
                    " pieces need one each");
  const int blocks = count_blocks(layers);
  if (blocks == 0) throw UserError("dist.pp_split counts transformer blocks, and this model has none");
  int sum = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] <= 0)
      throw UserError("dist.pp_split = " + pp_split + " leaves piece " + std::to_string(k) + " (stage " +
                      std::to_string(static_cast<int>(k) % stages) + ") without blocks");
    sum += counts[k];
  }
  if (sum != blocks)
    throw UserError("dist.pp_split = " + pp_split + " sums to " + std::to_string(sum) +
                    " blocks, the model has " + std::to_string(blocks));
  const std::vector<int> bounds = unit_bounds(layers);  // one unit per block
  std::vector<int> cuts = {0};
  int unit = 0;
  for (int c : counts) {
    unit += c;
    cuts.push_back(bounds[unit]);
  }
  return from_cuts(layers, cuts, stages, chunks);
}

std::vector<std::string> describe_stages(const StagePartition& partition,
                                         const std::vector<LayerCost>& layers) {
  std::vector<std::string> lines;
  for (int s = 0; s < partition.stages; ++s) {
    std::string ranges;
    std::vector<std::string> parts;  // non-block names in order, runs of blocks as "N blocks"
    int run = 0;
    auto flush = [&] {
      if (run > 0) parts.push_back(std::to_string(run) + (run == 1 ? " block" : " blocks"));
      run = 0;
    };
    std::int64_t params = 0;
    for (int c = 0; c < partition.chunks; ++c) {
      const StagePiece& p = partition.piece(s, c);
      ranges += (c ? ", " : "") + std::to_string(p.first);
      if (p.last - 1 > p.first) ranges += "–" + std::to_string(p.last - 1);
      params += p.parameters;
      for (int i = p.first; i < p.last; ++i) {
        if (layers[i].is_block) {
          ++run;
          continue;
        }
        flush();
        parts.push_back(layers[i].name);
      }
    }
    flush();
    std::string what;
    for (const std::string& part : parts) what += (what.empty() ? "" : ", ") + part;
    const double share =
        partition.total_flops > 0 ? 100.0 * partition.stage_flops(s) / partition.total_flops : 0;
    lines.push_back("stage " + std::to_string(s) + ": layers " + ranges + " (" + what + "), " +
                    si(double(params)) + " parameters, est. " +
                    std::to_string(static_cast<int>(std::lround(share))) + "% of a step");
  }
  return lines;
}

}  // namespace hpc::train
