// Grid (see grid.h).
#include "dist/grid.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace hpc::dist {

namespace {

constexpr GroupKind SPLIT_KINDS[] = {GroupKind::Dp, GroupKind::Tp, GroupKind::Pp, GroupKind::Embed};
constexpr size_t GROUPS_SHOWN = 8;  // per kind, on the start-up lines

std::string ranks_word(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

}  // namespace

std::string check_grid(int world, int tp, int pp) {
  if (tp < 1 || pp < 1) return "dist.tp and dist.pp must be at least 1";
  const int64_t cell = int64_t{tp} * pp;
  if (world % cell == 0) return "";
  if (pp == 1)
    return "dist.tp " + std::to_string(tp) + " does not divide the world of " + ranks_word(world) +
           ": run a multiple of " + std::to_string(tp) + " ranks, or choose a dist.tp that divides " +
           std::to_string(world);
  return "dist.tp " + std::to_string(tp) + " × dist.pp " + std::to_string(pp) + " = " + std::to_string(cell) +
         " does not divide the world of " + ranks_word(world) + ": run a multiple of " +
         std::to_string(cell) + " ranks, or choose dist.tp and dist.pp whose product divides " +
         std::to_string(world);
}

std::vector<std::string> grid_lines(const GridShape& shape, const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  out.push_back("grid: dp " + std::to_string(shape.dp) + " × pp " + std::to_string(shape.pp) + " × tp " +
                std::to_string(shape.tp) + " = " + ranks_word(shape.world()) +
                " (rank = (dp_i·pp + pp_i)·tp + tp_i: a tp group on adjacent ranks)");
  const struct {
    GroupKind kind;
    int size;
    const char* what;
  } kinds[] = {{GroupKind::Tp, shape.tp, "split each layer"},
               {GroupKind::Pp, shape.pp, "the stages of one pipeline"},
               {GroupKind::Dp, shape.dp, "average gradients"}};
  for (const auto& k : kinds) {
    if (k.size <= 1 || (k.kind == GroupKind::Dp && shape.effective(GroupKind::Dp) == GroupKind::World))
      continue;
    std::set<std::vector<int>> groups;
    for (int r = 0; r < shape.world(); ++r) groups.insert(shape.members(k.kind, r));
    std::string line = "  " + std::string(group_kind_name(k.kind)) + " groups (" + k.what + "):";
    size_t shown = 0;
    for (const std::vector<int>& g : groups) {
      if (shown++ == GROUPS_SHOWN) {
        line += " … (" + std::to_string(groups.size()) + " groups)";
        break;
      }
      std::vector<std::string> nodes;
      for (int r : g) {
        const std::string& h = static_cast<size_t>(r) < hosts.size() ? hosts[static_cast<size_t>(r)] : "?";
        if (std::find(nodes.begin(), nodes.end(), h) == nodes.end()) nodes.push_back(h);
      }
      std::string on;
      for (const std::string& h : nodes) on += (on.empty() ? "" : "+") + h;
      line += std::string(shown > 1 ? "," : "") + " [" + rank_list(g) + "] on " + on;
    }
    out.push_back(line);
  }
  return out;
}

Grid::Grid(Context& ctx, int tp, int pp) : ctx_(ctx) {
  const std::string problem = check_grid(ctx.world(), tp, pp);
  if (!problem.empty()) throw UserError(problem);
  shape_ = GridShape{ctx.world() / (tp * pp), pp, tp};
  rank_ = ctx.rank();
  coord_ = shape_.coord(rank_);
  ctx.set_grid_shape(shape_);
  host_.resize(GROUP_KINDS);
  device_.resize(GROUP_KINDS);
  // In one fixed order on every rank: each split is collective over the world.
  for (GroupKind kind : SPLIT_KINDS) host_[static_cast<size_t>(kind)] = make_group(ctx.host_comm(), kind);
}

Grid::~Grid() {
  // The groups before the world's communicators (the Context's) they were split from.
  device_.clear();
  host_.clear();
}

std::unique_ptr<Communicator> Grid::make_group(Communicator& world, GroupKind kind) {
  const GroupTag tag = GroupTag::of(shape_, kind, rank_);
  if (tag.kind == GroupKind::World) return nullptr;  // the world's own communicator serves
  // Every rank's group of this kind has one rank (or none): nothing to split, no collective.
  bool all_single = true;
  for (int r = 0; r < shape_.world() && all_single; ++r) all_single = shape_.members(kind, r).size() <= 1;
  if (all_single) return tag.ranks.empty() ? nullptr : std::make_unique<SelfComm>(tag);
  if (tag.ranks.empty()) return world.split(-1, 0, tag);  // joins the collective, belongs to no group
  const int key = static_cast<int>(std::find(tag.ranks.begin(), tag.ranks.end(), rank_) - tag.ranks.begin());
  return world.split(tag.ranks.front(), key, tag);
}

Communicator* Grid::resolve(std::vector<std::unique_ptr<Communicator>>& owned, Communicator& world,
                            GroupKind kind) {
  if (shape_.effective(kind) == GroupKind::World) return &world;
  return owned[static_cast<size_t>(kind)].get();
}

Communicator& Grid::host(GroupKind kind) {
  Communicator* c = resolve(host_, ctx_.host_comm(), kind);
  HPC_ASSERT(c != nullptr, std::string("this rank has no ") + group_kind_name(kind) + " group");
  return *c;
}

void Grid::use_device(Device device) {
  device_kind_ = device;
  Communicator& world = ctx_.grad_comm(device);
  if (&world == &ctx_.host_comm()) {  // the host communicators carry the device's buffers too
    device_world_ = nullptr;
    return;
  }
  device_world_ = &world;
  for (GroupKind kind : SPLIT_KINDS) device_[static_cast<size_t>(kind)] = make_group(world, kind);
}

Communicator& Grid::comm(GroupKind kind, Device device) {
  if (device == Device::CPU || device_world_ == nullptr) return host(kind);
  HPC_ASSERT(device == device_kind_, "Grid::comm: use_device was called for another device");
  Communicator* c = resolve(device_, *device_world_, kind);
  HPC_ASSERT(c != nullptr, std::string("this rank has no ") + group_kind_name(kind) + " group");
  return *c;
}

std::vector<std::string> Grid::lines() const {
  std::vector<std::string> hosts;
  for (const PeerInfo& p : ctx_.peers()) hosts.push_back(p.host);
  return grid_lines(shape_, hosts);
}

}  // namespace hpc::dist
