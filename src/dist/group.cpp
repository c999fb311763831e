// The grid's shape and its groups (see group.h).
#include "dist/group.h"

#include <cstdlib>

namespace hpc::dist {

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::Dp:
      return "dp";
    case GroupKind::Tp:
      return "tp";
    case GroupKind::Pp:
      return "pp";
    case GroupKind::Embed:
      return "embed";
    default:
      return "world";
  }
}

std::vector<int> GridShape::members(GroupKind kind, int rank) const {
  const GridCoord me = coord(rank);
  std::vector<int> out;
  switch (effective(kind)) {
    case GroupKind::World:
      for (int r = 0; r < world(); ++r) out.push_back(r);
      break;
    case GroupKind::Tp:
      for (int t = 0; t < tp; ++t) out.push_back(rank_of({me.dp, me.pp, t}));
      break;
    case GroupKind::Pp:
      for (int p = 0; p < pp; ++p) out.push_back(rank_of({me.dp, p, me.tp}));
      break;
    case GroupKind::Dp:
      for (int d = 0; d < dp; ++d) out.push_back(rank_of({d, me.pp, me.tp}));
      break;
    case GroupKind::Embed:
      if (me.pp != 0 && me.pp != pp - 1) break;  // a middle stage holds no embedding
      out.push_back(rank_of({me.dp, 0, me.tp}));
      if (pp > 1) out.push_back(rank_of({me.dp, pp - 1, me.tp}));
      break;
  }
  return out;
}

std::string GridShape::group_name(GroupKind kind, int rank) const {
  const GroupKind k = effective(kind);
  if (k == GroupKind::World) return "world";
  return std::string(group_kind_name(k)) + "[" + rank_list(members(k, rank)) + "]";
}

GroupTag GroupTag::world(int n) {
  GroupTag t;
  for (int r = 0; r < n; ++r) t.ranks.push_back(r);
  t.name = "world";
  return t;
}

GroupTag GroupTag::of(const GridShape& shape, GroupKind kind, int rank) {
  GroupTag t;
  t.kind = shape.effective(kind);
  t.ranks = shape.members(t.kind, rank);
  t.name = shape.group_name(t.kind, rank);
  return t;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

bool parse_rank_list(const std::string& text, std::vector<int>& out) {
  out.clear();
  size_t i = 0;
  auto number = [&](int& v) {
    const size_t b = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == b || i - b > 9) return false;
    v = std::atoi(text.substr(b, i - b).c_str());
    return true;
  };
  while (i < text.size()) {
    int a = 0, b = 0;
    if (!number(a)) return false;
    b = a;
    if (i < text.size() && text[i] == '-') {
      ++i;
      if (!number(b) || b < a) return false;
    }
    for (int r = a; r <= b; ++r) out.push_back(r);
    if (i < text.size() && text[i++] != ',') return false;
  }
  return !out.empty();
}

bool parse_group_name(const std::string& name, GroupKind& kind, std::vector<int>& ranks) {
  ranks.clear();
  if (name == "world") {
    kind = GroupKind::World;
    return true;
  }
  const size_t open = name.find('[');
  if (open == std::string::npos || name.back() != ']') return false;
  const std::string k = name.substr(0, open);
  for (GroupKind g : {GroupKind::Dp, GroupKind::Tp, GroupKind::Pp, GroupKind::Embed})
    if (k == group_kind_name(g)) {
      kind = g;
      return parse_rank_list(name.substr(open + 1, name.size() - open - 2), ranks);
    }
  return false;
}

}  // namespace hpc::dist
