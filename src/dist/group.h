// The parallel grid's shape and its groups, as plain values (no MPI).
//
// World = dp × pp × tp, ranks ordered tp fastest, then pp, then dp:
//   rank = (dp_i · pp + pp_i) · tp + tp_i
// so a tensor-parallel group sits on adjacent ranks, i.e. within a node when
// the launcher places ranks by node (Megatron-LM and torchtitan order them
// the same way). Every rank belongs to exactly one group of each kind:
//   tp     the ranks that split one layer's tensors (same dp_i, pp_i)
//   pp     the stages of one pipeline (same dp_i, tp_i)
//   dp     the replicas that average gradients (same pp_i, tp_i)
//   embed  the first and the last stage of one pipeline (same dp_i, tp_i),
//          which hold the two uses of a tied embedding (one rank when pp = 1)
//   world  everyone
// A group is named by its kind and its world ranks, "tp[0-1]", "dp[0,2]", so
// that any rank can name any other rank's group (hang reports, flight
// records) from the shape alone. The dp group of a grid with tp = pp = 1 is
// the world itself (one communicator, named "world", as before the grid).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpc::dist {

enum class GroupKind : int32_t { World = 0, Dp, Tp, Pp, Embed };
constexpr int GROUP_KINDS = 5;

const char* group_kind_name(GroupKind kind);  // "world", "dp", "tp", "pp", "embed"

struct GridCoord {
  int dp = 0, pp = 0, tp = 0;
};

struct GridShape {
  int dp = 1, pp = 1, tp = 1;

  int world() const { return dp * pp * tp; }
  GridCoord coord(int rank) const { return {rank / (tp * pp), (rank / tp) % pp, rank % tp}; }
  int rank_of(const GridCoord& c) const { return (c.dp * pp + c.pp) * tp + c.tp; }
  // The world ranks of `rank`'s group of `kind`, in group-rank order (empty: rank is in no such group).
  std::vector<int> members(GroupKind kind, int rank) const;
  // The kind a group is known by: the dp group that spans the world is the world.
  GroupKind effective(GroupKind kind) const {
    return kind == GroupKind::Dp && pp == 1 && tp == 1 ? GroupKind::World : kind;
  }
  // "world", "tp[0-1]", "dp[0,2]": `rank`'s group of `kind` (of its effective kind).
  std::string group_name(GroupKind kind, int rank) const;
};

// One communicator's group: what its collectives are numbered within and how it is named.
struct GroupTag {
  GroupKind kind = GroupKind::World;
  std::vector<int> ranks;  // world ranks, in group-rank order
  std::string name;        // "world", "tp[0-1]"
  // The world of `n` ranks.
  static GroupTag world(int n);
  // `rank`'s group of `kind` in `shape`.
  static GroupTag of(const GridShape& shape, GroupKind kind, int rank);
};

// "0,2-5,7"
std::string rank_list(const std::vector<int>& ranks);
// The inverse of rank_list; false on anything else.
bool parse_rank_list(const std::string& text, std::vector<int>& out);
// "tp[0-1]" → Tp and {0, 1}; "world" → World and no ranks (all of them). False on anything else.
bool parse_group_name(const std::string& name, GroupKind& kind, std::vector<int>& ranks);

}  // namespace hpc::dist
