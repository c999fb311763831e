// The doctor's report, for people (text, nccl-tests style) and for
// programs (--json). Both are rendered from the same Report, so they always
// hold the same facts; the JSON keys are listed in docs/cluster.md "hpctrain doctor".
#pragma once

#include <string>
#include <vector>

#include "doctor/analysis.h"
#include "doctor/facts.h"
#include "doctor/preflight.h"

namespace hpc::doctor {

struct Report {
  LaunchFacts launch;
  std::vector<RankFacts> ranks;  // in rank order; ranks[0] is the reporting process
  Preflight preflight;
  std::vector<Finding> findings;
  std::string data_path;     // --data.path ("" = not given)
  std::string train_device;  // --train.device

  int problems() const;
  int warnings() const;
  // The first rank of every node, in node order (per-node facts come from it).
  std::vector<const RankFacts*> node_leaders() const;
  std::vector<int> ranks_on_node(int node) const;
  // The preflight's outlier, with nodes taken from the ranks.
  SlowSpot slow_spot() const;
};

std::string render_text(const Report& r);
std::string render_json(const Report& r);

}  // namespace hpc::doctor
