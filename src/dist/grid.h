// Grid: the parallel grid of one run and the communicators of its groups.
//
// World = dp × pp × tp (dist/group.h for the rank order and the groups).
// One object owns every group's communicators and is passed to what needs
// them — no globals. Code that means "my data-parallel replica" asks for the
// dp group (the sampler, the gradient average, ZeRO's shards, the loss
// average); code that splits a layer asks for the tp group; code that means
// "every process" (the stop vote, checkpoint coordination) asks for the
// world. A group of one rank is a SelfComm, so code has no "is it split"
// branches; the dp group of a grid with tp = pp = 1 is the world's own
// communicator (as before the grid existed).
//
// Host communicators (MPI) come from MPI_Comm_split of the world's; on GPUs
// use_device() splits the world's NCCL communicator the same way
// (ncclCommSplit), so device buffers (gradients, activations) of every
// group travel over NCCL. Every communicator keeps the world's guarantees:
// a collective or message completes or throws PeerError within
// dist.timeout, and the report names the rank and the group.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"
#include "dist/context.h"
#include "dist/group.h"

namespace hpc::dist {

// "dist.tp 3 does not divide the world of 4 ranks …" for a shape the world cannot take; "" if fine.
std::string check_grid(int world, int tp, int pp);

// The start-up lines: the grid, then each kind of group of more than one rank with its groups' ranks
// and nodes (hosts: every world rank's host).
std::vector<std::string> grid_lines(const GridShape& shape, const std::vector<std::string>& hosts);

class Grid {
 public:
  // Collective over the world: sets ctx's grid shape and splits the host communicators. Throws
  // UserError (check_grid) when dist.tp × dist.pp does not divide the world.
  Grid(Context& ctx, int tp, int pp);
  ~Grid();
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int world() const { return shape_.world(); }
  int rank() const { return rank_; }
  int dp() const { return shape_.dp; }
  int tp() const { return shape_.tp; }
  int pp() const { return shape_.pp; }
  int dp_rank() const { return coord_.dp; }
  int tp_rank() const { return coord_.tp; }
  int pp_rank() const { return coord_.pp; }

  // Host buffers (MPI; SelfComm for a group of one). Embed: null on a middle pipeline stage.
  Communicator& host(GroupKind kind);
  Communicator* host_embed() { return host_[static_cast<size_t>(GroupKind::Embed)].get(); }
  // Buffers on `device`: NCCL on GPUs (once use_device(CUDA) made them), else the host ones.
  Communicator& comm(GroupKind kind, Device device);
  // Collective over the world: the device communicators dist.backend chooses for `device` (on GPUs
  // the world's NCCL communicator and its splits). Called once, before comm(…, device).
  void use_device(Device device);

  // grid_lines for this run.
  std::vector<std::string> lines() const;

 private:
  // The communicator of this rank's group of `kind`, split from `world` (owned here unless it is the world).
  std::unique_ptr<Communicator> make_group(Communicator& world, GroupKind kind);
  Communicator* resolve(std::vector<std::unique_ptr<Communicator>>& owned, Communicator& world,
                        GroupKind kind);

  Context& ctx_;
  GridShape shape_;
  GridCoord coord_;
  int rank_ = 0;
  Device device_kind_ = Device::CPU;  // what use_device was called for
  // Per GroupKind: the communicator (null where the world's own serves, or no group: embed).
  std::vector<std::unique_ptr<Communicator>> host_, device_;
  Communicator* device_world_ = nullptr;  // the world's device communicator (the Context's)
};

}  // namespace hpc::dist
