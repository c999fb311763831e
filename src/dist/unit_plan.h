// The plan of ZeRO stage 3 (dist.zero = 3): which layers form a unit, what
// happens to each unit before and after every layer's forward and backward,
// and which fixed buffer each unit is gathered into. Pure: built from the
// model's layout and the options, with no communicator, so that tests can
// check it and `hpctrain doctor --memory` can print what it costs.
//
// A unit is a run of consecutive layers whose parameters are gathered
// together (FSDP's unit): with dist.zero_unit_mb = 0 every layer that has
// parameters starts one (a transformer block, a residual block); otherwise
// consecutive layers are bucketed up to zero_unit_mb. A layer is never split,
// so a layer larger than zero_unit_mb is a UserError naming it and its
// largest tensor. Parameterless layers join the unit before them. A unit may
// read another's parameters (a tied output projection reads the embedding's):
// that unit is a dependency and is resident whenever the unit is.
//
// The programs: the ParamSource hooks (nn/model.h) run, per layer, a list of
// operations that this plan fixes once —
//   Gather(u)      issue the all-gather of u's parameters into its buffer
//   Wait(u)        u's gather must be complete before the layer runs
//   Free(u)        u's buffer may be taken by another unit
//   OpenGrads(v)   v's gradient staging buffer is cleared for backward to add into
//   ReduceGrads(v) start reduce-scattering v's gradients (its last writer is done)
//   SettleGrads(v) that reduce-scatter is complete: the own part goes into the shard
// — derived from holds: a unit is resident while its forward or backward
// runs or is prefetched (one unit ahead, dist.zero_prefetch), and from its
// forward to its backward when it is kept (its parameters ≤ zero_keep_mb,
// like DeepSpeed's persistence threshold, and always the last unit, whose
// backward follows at once); each hold also holds the unit's dependencies.
// At most one unit's reduce-scatter runs while backward computes: starting
// the next settles the one before (it had a whole unit's backward to finish).
//
// Fixed buffers: walking the training step's programs (and an evaluation
// forward's) gives, for every pair of units, whether they are ever resident
// (or their gradients staged) at the same time. Units that never are share a
// buffer; buffers are sized to their largest unit and allocated once. So a
// unit's layers are bound once to views of its buffers and never rebound,
// and no step allocates. Inside its buffer a unit starts at element
// begin % align, so every parameter view keeps the alignment it has in the
// flat buffer (the same kernels and the same bits as unsharded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/model.h"

namespace hpc::dist {

struct Unit {
  int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
  int64_t begin = 0, end = 0;          // its parameters: elements [begin, end) of the flat layout
  std::vector<int> deps;               // other units its layers read (tied parameters), ascending
  std::vector<int> writes;             // units whose gradients its layers' backward adds into (itself first)
  bool kept = false;                   // in training, resident from its forward to its backward
  int param_buffer = -1;               // its gather buffer
  int grad_buffer = -1;                // its gradient staging buffer
  int64_t count() const { return end - begin; }
};

struct UnitOp {
  enum Kind { Gather, Wait, Free, OpenGrads, ReduceGrads, SettleGrads };
  Kind kind;
  int unit;
  bool operator==(const UnitOp& o) const { return kind == o.kind && unit == o.unit; }
};
const char* unit_op_name(UnitOp::Kind k);

// The operations around every layer of one pass, in layer index order.
struct UnitProgram {
  bool reverse = false;  // a backward: its layers run from the last to the first
  std::vector<std::vector<UnitOp>> before, after;
  std::vector<UnitOp> finish;  // backward: after the last layer (what is left to reduce and settle)
};

class UnitPlan {
 public:
  struct Options {
    int64_t unit_elems = 0;  // 0: a unit per layer with parameters
    int64_t keep_elems = 0;  // units this small are kept from forward to backward
    int64_t align = 16;      // elements: 64 bytes of the model's dtype
    bool prefetch = true;    // gather the next unit while the current one computes
    // A layer larger than unit_elems is a unit of its own instead of an error (stage 2's staging,
    // whose units are about a bucket: a bucket may be smaller than a layer).
    bool oversize_alone = false;
    // Where the numbers in error messages come from: "dist.zero_unit_mb 4".
    std::string unit_option;
    double bytes_per_elem = 4;
  };
  UnitPlan(const nn::Model& model, const Options& options);

  const std::vector<Unit>& units() const { return units_; }
  int unit_of_layer(int layer) const { return unit_of_layer_[static_cast<size_t>(layer)]; }
  int unit_at(int64_t offset) const;  // the unit holding flat element `offset`
  // Element offset of unit u's first parameter inside its buffers.
  int64_t pad(int u) const { return units_[static_cast<size_t>(u)].begin % options_.align; }
  const Options& options() const { return options_; }

  // training: a training forward (kept units stay); else an evaluation forward.
  const UnitProgram& forward(bool training) const { return training ? train_forward_ : eval_forward_; }
  // reduce: the last micro-step (gradients reduce-scattered as units complete); else accumulating.
  const UnitProgram& backward(bool reduce) const { return reduce ? reduce_backward_ : accumulate_backward_; }

  // Capacities in elements of the fixed buffers (a unit's pad included).
  const std::vector<int64_t>& param_buffers() const { return param_buffers_; }
  const std::vector<int64_t>& grad_buffers() const { return grad_buffers_; }
  int64_t param_buffer_elems() const;
  int64_t grad_buffer_elems() const;
  // The most parameters resident at once in a training step (what the gather buffers must hold).
  int64_t peak_resident_elems() const { return peak_resident_; }

  // One line per unit ("unit 3: layers 3-3, 7.1 M parameters, buffer 1, kept"), for the header.
  std::string describe() const;

 private:
  void build_units(const nn::Model& model);
  void build_programs();
  void assign_buffers();

  Options options_;
  int num_layers_ = 0;
  std::vector<Unit> units_;
  std::vector<int> unit_of_layer_;
  UnitProgram train_forward_, eval_forward_, reduce_backward_, accumulate_backward_;
  std::vector<int64_t> param_buffers_, grad_buffers_;
  int64_t peak_resident_ = 0;
};

}  // namespace hpc::dist
